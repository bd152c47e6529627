"""The one decoding loop: prefill, then rounds of draft -> verify -> accept, until EOT or max length.

Greedy is the same loop with nothing drafted. Policy (how many tokens to draft) is asked once
per round and told what happened; it never sees decoder state. Drafts pass through the
verifier, which alone decides what is emitted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from . import draft_reach
from .drafters.base import Drafter, NullDrafter
from .drafters.chain import DrafterChain
from .policy import FixedDraftLength, first_token_gate
from .stats import DecodeStats
from .verifier import DecoderSession


class DraftLengthPolicy(Protocol):
    def draft_len(self) -> int: ...

    def record(self, n_proposed: int, n_accepted: int, filler_accepted: int = 0) -> None: ...


def decode_window(session: DecoderSession, drafter: Drafter, policy: DraftLengthPolicy, max_new_tokens: int,
                  eot: int, stats: DecodeStats, filler: Callable[[Sequence[int]], int],
                  gate: Callable[[Sequence[int]], bool] | None = None) -> list[int]:
    """Decode one window; returns the emitted tokens (EOT included when reached).

    ``gate`` (optional) sees the first token, which the prefill gives in both numerics, and may
    turn a batch-invariant window single-row before its first decoder step; ``session.numerics``
    then says what was used. No decoder call has run in either numerics yet, so the window's
    tokens are exactly greedy's in the numerics it ends up with.
    """
    t0 = time.perf_counter()
    out = [session.start()]
    t1 = time.perf_counter()
    stats.prefill_s += t1 - t0
    if session.numerics == "batch-invariant" and gate is not None and session.can_go_single_row and not gate(out):
        session.numerics = "single-row"
    if session.numerics == "single-row":
        step = session.step
        while out[-1] != eot and len(out) < max_new_tokens:
            out.append(step(out))
        stats.steps += len(out) - 1
    else:
        _speculate(session, drafter, policy, max_new_tokens, eot, stats, filler, out)
    stats.steps_s += time.perf_counter() - t1
    stats.tokens += len(out)
    return out


def decode_with_drafters(session: DecoderSession, chain: DrafterChain, policy: DraftLengthPolicy, max_new_tokens: int,
                         eot: int, stats: DecodeStats, filler: Callable[[Sequence[int]], int],
                         gated: bool = False) -> list[int]:
    """One window as the engine runs it: speculated where the session is batch-invariant and a
    drafter exists (``filler`` guesses in spare rows; ``gated``: the policy chose the numerics, so
    the first-token gate may still turn the window single-row), else plain greedy (the
    no-speculation oracle among them) with a constant filler. ``session.numerics`` then says which."""
    speculating = speculates(session.numerics, chain, policy)
    gate = first_token_gate(chain, policy) if speculating and gated else None
    # A window that drafts nothing teaches the policy nothing (its learning comes from the shadow).
    return decode_window(session, chain if speculating else NullDrafter(), policy if speculating else
                         FixedDraftLength(0), max_new_tokens, eot, stats,
                         filler if speculating else (lambda _tokens: eot), gate)


def speculates(numerics: str, chain: DrafterChain, policy: DraftLengthPolicy) -> bool:
    """Whether a window drafts: batch-invariant, with a drafter, at a draft length above 0 (a
    ``NoDrafts`` window has none); one that does not learns from the shadow instead."""
    return numerics == "batch-invariant" and bool(chain) and policy.draft_len() > 0


def learn_from_window(chain: DrafterChain, tokens: Sequence[int], numerics: str, policy: DraftLengthPolicy,
                      stats: DecodeStats, guesser, eot: int) -> None:
    """After a window: where it was not speculated (single-row, or batch-invariant with
    ``NoDrafts``), its drafters (draft models excepted: they cost a decoder each) replay it in the
    shadow so the policy (a ``NoDrafts``' learner) learns what speculation would have given; then
    drafters and the filler's bigrams learn its tokens."""
    learner = getattr(policy, "learner", policy)
    if chain and not speculates(numerics, chain, policy):
        shadow = DrafterChain([d for d in chain.drafters if not getattr(d, "costly", False)])
        if shadow:
            shadow_replay(shadow, tokens, learner.draft_len(), stats, learner)
    text_tokens = [t for t in tokens if t != eot]
    chain.end(text_tokens)
    guesser.learn(text_tokens)


def _speculate(session: DecoderSession, drafter: Drafter, policy: DraftLengthPolicy, max_new_tokens: int, eot: int,
               stats: DecodeStats, filler: Callable[[Sequence[int]], int], out: list[int]) -> None:
    pad_to = session.row_floor - 1
    name = getattr(drafter, "name", "drafter")
    while out[-1] != eot and len(out) < max_new_tokens:
        room = max_new_tokens - len(out) - 1  # draft tokens that could still be emitted
        k = min(policy.draft_len(), room)
        drafts = draft_reach.propose(drafter, policy, out, k, room)
        n_real = len(drafts)
        while len(drafts) < pad_to:  # the call needs this many rows anyway: fill them with guesses
            drafts.append(filler(out + drafts))
        accepted, nxt = session.verify(out, drafts)
        n_acc = len(accepted)
        drafter.observe(min(n_acc, n_real))
        policy.record(n_real, min(n_acc, n_real), max(0, n_acc - n_real))
        stats.record_verify(max(k, n_real), len(drafts), n_acc, len(drafts) - n_real, getattr(drafter, "last_source", name),
                            rows=min(len(drafts) + 1, session.row_ceiling))
        out.extend(accepted)
        if nxt is not None:
            out.append(nxt)
    if len(out) > max_new_tokens:  # filler rows may run past the limit; greedy stops there
        del out[max_new_tokens:]


def shadow_replay(drafter: Drafter, tokens: Sequence[int], k: int, stats: DecodeStats,
                  policy: DraftLengthPolicy | None = None) -> None:
    """Replay a window decoded single-row as if it had been speculated, at no decoder cost.

    The drafter sees exactly the histories a real speculative run would show it, so the
    acceptance measured here predicts what speculation would have given on this window.
    """
    if k <= 0:
        return
    i = 1
    while i < len(tokens):
        proposal = list(drafter.propose(tokens[:i], k))[:k]
        n = 0
        while n < len(proposal) and i + n < len(tokens) and proposal[n] == tokens[i + n]:
            n += 1
        drafter.observe(n)
        if policy is not None:
            policy.record(len(proposal), n)
        stats.shadow_rounds += 1
        stats.shadow_drafted += len(proposal)
        stats.shadow_accepted += n
        i += n + 1
