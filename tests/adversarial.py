"""Drafters built to be wrong (or too right): exactness must survive all of them."""

from __future__ import annotations

import random
from collections.abc import Sequence


class _Base:
    name = "adversarial"

    def begin(self, window) -> None:
        pass

    def observe(self, n_accepted: int) -> None:
        pass

    def end(self, tokens: Sequence[int]) -> None:
        pass


class RandomIds(_Base):
    """Random ids, including negative and beyond-vocabulary ones, of random length."""

    def __init__(self, seed: int, vocab: int) -> None:
        self.rng, self.vocab = random.Random(seed), vocab

    def propose(self, tokens, k):
        return [self.rng.randrange(-3, self.vocab + 3) for _ in range(self.rng.randrange(0, k + 1))]


class OutOfVocabulary(_Base):
    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def propose(self, tokens, k):
        return [self.vocab + 7, -1, 10**9][:k]


class EarlyEot(_Base):
    def __init__(self, eot: int) -> None:
        self.eot = eot

    def propose(self, tokens, k):
        return [self.eot] * k


class Oracle(_Base):
    """The true continuation, optionally with one token flipped per proposal, optionally too long."""

    def __init__(self, reference: Sequence[int], eot: int, flip: bool = False, seed: int = 0, overlong: bool = False):
        self.ref = list(reference) + [eot]
        self.flip, self.rng, self.overlong = flip, random.Random(seed), overlong

    def propose(self, tokens, k):
        n = len(tokens)
        draft = self.ref[n:n + (400 if self.overlong else k)]
        if self.flip and draft:
            i = self.rng.randrange(len(draft))
            draft[i] = (draft[i] + 1) % 50000
        return draft


class SureOfIt(_Base):
    """Claims certainty (``confident_reach``) in whatever it proposes, so the policy verifies it
    past its K: the true continuation with one token flipped, random ids, more tokens than asked,
    or confidences that are not probabilities. ``asked``: the longest draft it was asked for."""

    confident_reach = True

    def __init__(self, reference: Sequence[int], eot: int, vocab: int, mode: str, seed: int = 0) -> None:
        self.ref, self.vocab, self.mode = [*reference, eot], vocab, mode
        self.rng, self.asked, self.last_confidence = random.Random(seed), 0, []
        self.name = f"sure-{mode}"

    def propose(self, tokens, k):
        self.asked = max(self.asked, k)
        n = len(tokens)
        if self.mode == "random":
            draft = [self.rng.randrange(-3, self.vocab + 3) for _ in range(k)]
        else:
            draft = self.ref[n:n + (400 if self.mode == "overlong" else k)]
            if draft and self.mode in ("flip", "odd"):
                i = self.rng.randrange(len(draft))
                draft[i] = (draft[i] + 1) % 50000
        # "odd": above 1 first (read as sure, so that some round drafts on any cost curve), then NaN and below 0
        self.last_confidence = ([7.0, 1.5, float("nan"), -2.0] * k)[:len(draft)] if self.mode == "odd" else [1.0] * len(draft)
        return draft

    def keep(self, n: int) -> None:
        del self.last_confidence[n:]


class Repeater(_Base):
    """Proposes the last emitted token again and again (a prompt-lookup failure mode)."""

    def propose(self, tokens, k):
        return [tokens[-1]] * k


def check_exact_under_adversaries(engine, encoder_output, seed: int, label: str, **options) -> list[int]:
    """Random ids, early EOT, a repeater, a flipped and an overlong oracle (K 1, 3, 5, 8, 16) never
    change the batch-invariant tokens of ``decode(..., **options)`` (a sampler, timestamps), and a
    right drafter is accepted. Returns the tokens."""
    from decoding import decode

    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    oracle, _ = decode(engine, encoder_output, "batch-invariant", **options)
    drafters = {"random": RandomIds(seed, vocab), "early_eot": EarlyEot(eot), "repeat": Repeater(),
                "flip": Oracle(oracle, eot, flip=True, seed=seed), "overlong": Oracle(oracle, eot, overlong=True)}
    for (name, drafter), k in zip(drafters.items(), (1, 3, 5, 8, 16)):
        tokens, _ = decode(engine, encoder_output, "batch-invariant", drafter, k=k, filler=engine.guesser, **options)
        assert tokens == oracle, f"{label}: drafter {name} K={k} changed the output"
    tokens, stats = decode(engine, encoder_output, "batch-invariant", Oracle(oracle, eot), k=8, **options)
    assert tokens == oracle, f"{label}: the right drafts changed the output"
    # Right drafts are accepted: a call confirms up to as many tokens as it has rows, so a short
    # output under a low row ceiling (2..3 on an H200's int8_float16) needs more than half its length.
    rows = min(engine.row_ceiling or 17, 9)
    assert stats.verify_calls < len(oracle) / 2 or stats.verify_calls <= -(-len(oracle) // rows) + 1, \
        f"{label}: {stats.verify_calls} calls for {len(oracle)} tokens drafted right"
    return oracle
