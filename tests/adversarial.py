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


class Repeater(_Base):
    """Proposes the last emitted token again and again (a prompt-lookup failure mode)."""

    def propose(self, tokens, k):
        return [tokens[-1]] * k
