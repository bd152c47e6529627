"""What a draft model costs and what it is expected to save: the numbers behind ``worth_running``.

A draft model only pays where its drafts are right often enough for its step, encoder and
prefill time to be won back (on CPU it rarely is). This room holds what the drafter measures
(``DraftModelStats``), how a decoder step is timed before anything was measured
(``decoder_step_ms``), and how those measurements become an expected speedup and draft length
(``draft_model_estimate``), so that the drafter itself keeps only its protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backend import LoadedModel
from ..model_limits import FULL_ENCODER_FRAMES
from ..policy import VerifyCost, draft_model_best_k, expected_tokens

ACCEPT_PRIOR = 0.7  # per-position acceptance assumed before a draft model has been measured
# Share of the draft encoder's time that an ahead draft model adds to a window's wall time (it
# runs beside the 2-thread main encoder). Measured, base + tiny.en: long-form 114 and 176 ms more
# main encoder per window next to a draft encoder of about 450 ms (results/bench9-longform,
# bench9-longform-policy), short real clips about 22 ms next to 30-60 ms (bench10-real-policy).
AHEAD_ENCODER_SHARE = 0.5
# What a window pays for an ahead draft model besides that (its prefill and first drafts beside the
# main prefill, the thread handovers): on 2-5-token digit clips (results/bench9-real) the decoder
# phase took about 7 ms more per clip with the draft model than single-row greedy.
AHEAD_WINDOW_MS = 8.0


@dataclass
class DraftModelStats:
    """Where a draft model's time goes and how its drafts fare (summed over windows)."""

    windows: int = 0
    encoder_s: float = 0.0
    prefill_s: float = 0.0
    calls: int = 0  # decoder calls (1-row steps and batched feeds)
    rows: int = 0  # tokens fed through those calls
    decode_s: float = 0.0
    rollbacks: int = 0
    asked: int = 0  # rounds that reached this drafter in a drafting window (earlier drafters had nothing)
    proposals: int = 0
    proposed: int = 0
    accepted: int = 0
    tried_by_pos: list[int] = field(default_factory=list)
    hit_by_pos: list[int] = field(default_factory=list)

    @property
    def step_ms(self) -> float:
        return 1000.0 * self.decode_s / self.calls if self.calls else 0.0

    @property
    def encoder_ms(self) -> float:
        return 1000.0 * self.encoder_s / self.windows if self.windows else 0.0

    def accept_by_pos(self) -> list[float]:
        """Chance that draft i is right given drafts before it were (positions never tried omitted)."""
        return [h / t for h, t in zip(self.hit_by_pos, self.tried_by_pos) if t]

    def record(self, proposed: int, accepted: int) -> None:
        self.proposals += 1
        self.proposed += proposed
        self.accepted += accepted
        while len(self.tried_by_pos) < proposed:
            self.tried_by_pos.append(0)
            self.hit_by_pos.append(0)
        for i in range(min(proposed, accepted + 1)):
            self.tried_by_pos[i] += 1
            self.hit_by_pos[i] += int(i < accepted)


def draft_model_estimate(stats: DraftModelStats, draft_ms: float, main_step_ms: float, verify_cost: VerifyCost,
                         row_floor: int, tokens_per_window: float, draft_encoder_ms: float | None, *,
                         ahead: bool) -> tuple[int, float, str]:
    """The best K for a draft model, the speedup over greedy expected with it, and why.

    Uses measured acceptance by position (``ACCEPT_PRIOR`` before any), the draft's step time
    ``draft_ms``, and its encoder + prefill spread over the tokens it helps decode: at most
    ``tokens_per_window``, and where drafters asked before it (a domain token map) leave it few
    rounds, the tokens of those rounds only. ``ahead``: the draft model runs on its own thread
    (``DraftAhead``), beside the main encoder and on the core the main decoder leaves idle.
    """
    accept = stats.accept_by_pos() or [ACCEPT_PRIOR]
    if draft_encoder_ms is None:  # before any window: a full window's encoder, or ahead a short one's
        draft_encoder_ms = stats.encoder_ms if stats.windows else main_step_ms * (8 if ahead else 40)
    fixed = draft_encoder_ms + (1000.0 * stats.prefill_s / stats.windows if stats.windows else 0.0)
    if ahead:  # runs beside the main encoder, on the core the decoder leaves idle
        fixed = fixed * AHEAD_ENCODER_SHARE + AHEAD_WINDOW_MS
    if stats.windows >= 2:  # the rounds that reach it, at the tokens a round yields
        reached = stats.asked / stats.windows * expected_tokens(accept, 4)
        tokens_per_window = min(tokens_per_window, reached)
    k, speedup = draft_model_best_k(accept, main_step_ms, draft_ms, verify_cost, row_floor,
                                    fixed / max(tokens_per_window, 1.0), parallel=ahead)
    why = (f"draft model expected speedup {speedup:.2f}x (K={k}, draft/main step {draft_ms:.1f}/{main_step_ms:.1f} ms,"
           f" acceptance {accept[0]:.2f}, {tokens_per_window:.0f} tokens a window)")
    return k, speedup, why


def decoder_step_ms(lm: LoadedModel, steps: int = 8) -> float:
    """Median time of a 1-row decoder step on a random full-window encoder output (no encoder run)."""
    encoder_output, prompt = lm._random_window(FULL_ENCODER_FRAMES)
    state, _ = lm.decoder.prefill(encoder_output, prompt)
    token = lm.tokenizer.encode(" the")[0]
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        lm.decoder.forward_step_greedy(state, token, lm.suppress)
        times.append(time.perf_counter() - t0)
    return 1000.0 * float(np.median(times[1:]))
