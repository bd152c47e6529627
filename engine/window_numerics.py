"""Which numerics a window decodes in, why, and with which draft-length policy.

A room of its own because it is policy, not transcription: the choice weighs the self-test (which
decoder is exact here, and whether the invariant one is faster than single-row), the drafters'
expected speedup and what the draft model costs, all measured once per engine. The transcriber
asks it once per window (``choose``, with the window's self-test) and tells it how long windows
turn out (``observe``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from .backend import LoadedModel, SelfTestResult
from .drafters.chain import DrafterChain
from .policy import (
    SPECULATE_MARGIN,
    AdaptiveDraftLength,
    FixedDraftLength,
    VerifyCost,
    choose_numerics,
    plain_steps_instead,
)
from .transcribe_options import TranscribeOptions

WINDOW_TOKENS_PRIOR = 40.0  # tokens a window emits, until windows are seen


class WindowNumerics:
    """The per-window numerics decision of one engine (see module docstring)."""

    def __init__(self, lm: LoadedModel, selftest_result: SelfTestResult | None, verify_cost: VerifyCost,
                 draft_drafter=None) -> None:
        """``selftest_result``: the full-context self-test, read here once (the draft model's window
        prices); each window's own comes with ``choose``."""
        self.lm, self.verify_cost = lm, verify_cost
        self.row_floor = selftest_result.row_floor if selftest_result else None
        self.draft_drafter = draft_drafter
        self.window_tokens = WINDOW_TOKENS_PRIOR  # running mean: what a window's fixed costs spread over
        if draft_drafter is not None:
            from .drafters.draft_model import decoder_step_ms

            self.main_step_ms = decoder_step_ms(lm)
            self.draft_window_cost = self._drafting_window_cost(selftest_result)

    def observe(self, n_tokens: int) -> None:
        """A window emitted ``n_tokens``."""
        self.window_tokens += 0.25 * (n_tokens - self.window_tokens)

    def choose(self, opts: TranscribeOptions, chain: DrafterChain, policy: AdaptiveDraftLength | FixedDraftLength,
               window_s: float = 30.0, check: SelfTestResult | None = None):
        """Numerics for the next window, why, and the draft-length policy it runs with.

        Where the invariant decoder is ``preferred`` (faster than single-row), ``auto`` windows are
        batch-invariant whatever the drafters expect: drafts are then free of any numerics cost.

        ``window_s``: the window's audio, which bounds the tokens its fixed costs spread over
        (about 4 a second at most in speech): a 1 s command cannot pay for a draft model."""
        if not self.lm.has_step_api:
            return "native", "no step API in this CTranslate2 build", policy
        expected, window_policy, note = policy.expected_speedup(), policy, ""
        draft = self.draft_drafter
        if draft is not None:
            draft.enabled = False
            if chain:
                without = self.without_draft_model(expected, check)
                ok, k, why = draft.worth_running(self.main_step_ms, self.draft_window_cost, self.row_floor or 2,
                                                 tokens_per_window=min(self.window_tokens, 2.0 + 4.0 * window_s),
                                                 margin=without)
                note = f"; {why}, {without:.2f}x without it"
                if ok:
                    expected = max(expected, SPECULATE_MARGIN)
                    window_policy = policy if opts.draft_len is not None else FixedDraftLength(k)
                    draft.enabled = True
        auto = opts.numerics == "auto" or (opts.numerics_from_auto and opts.numerics == "batch-invariant")
        if check is not None and check.preferred and check.row_floor is not None and auto:
            numerics, reason = "batch-invariant", "the invariant decoder is faster than single-row here"
            if chain and window_policy is policy:
                window_policy = plain_steps_instead(policy, check.row_floor, bool(opts.draft_hint)) or window_policy
        else:
            numerics, reason = choose_numerics(opts.numerics, opts.speculation, self.row_floor, bool(chain), expected)
        if draft is not None and numerics != "batch-invariant":
            draft.enabled = False  # no draft encoder on windows that will not speculate
        return numerics, reason + note, window_policy

    def without_draft_model(self, expected: float, check: SelfTestResult | None) -> float:
        """The speedup over single-row greedy a window is expected to get without the draft model:
        the other drafters' (``expected``, the policy's estimate), and where every window decodes on
        the invariant decoder anyway, at least its plain 1-row calls' (``1 / c(1)``, wide prices)."""
        alternative = expected if math.isfinite(expected) else 0.0
        if check is not None and check.preferred:
            alternative = max(alternative, 1.0 / self.verify_cost(1))
        return max(SPECULATE_MARGIN, alternative)

    def _drafting_window_cost(self, check: SelfTestResult | None) -> VerifyCost:
        """The prices of the calls of a window the draft model drafts. Its thread takes the core
        that the invariant decoder's wide (2-thread) calls use when nothing runs beside them, so its
        windows' calls run on one thread: priced as such (measured once, cached), not at the wide
        prices that ``verify_cost`` holds (1.5x cheaper on this project's EPYC)."""
        if check is None or not check.wide or check.decoder != "invariant":
            return self.verify_cost
        measured = self.lm.call_costs(result=replace(check, wide=False))
        return VerifyCost(measured) if measured else self.verify_cost
