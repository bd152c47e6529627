"""Draft-model drafter: a small Whisper decodes a few tokens greedily ahead of the main model.

Per window the draft model runs its own encoder once (its own log-mel from the window's audio,
so 80- and 128-bin models can pair) and prefills its own prompt. Then it keeps one decoder state
for the whole window: each ``propose`` maps the main model's emitted tokens into the draft
vocabulary, rolls the state back to the longest prefix it already holds (``truncate_to_step``),
feeds the rest in one batched call, and decodes ahead. Nothing is re-prefilled or cloned.

The draft model's numerics do not matter for exactness (the main model verifies every token),
only for speed. On CPU a draft model rarely pays: see ``policy.draft_model_expected_speedup``
and ``DraftModelDrafter.worth_running``, which the engine should ask before each window.

This module holds the drafter protocol only; its parts live beside it: loading and checks in
``draft_load``, the decoder state and encoder input in ``draft_decoder``, the run-ahead thread in
``draft_ahead``, the measurements and cost model in ``draft_cost``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import SpecWhisperError, UnknownModelError, option_where
from ..model_limits import MAX_POSITIONS
from ..policy import SPECULATE_MARGIN, VerifyCost
from ..tokenizer import WhisperTokenizer
from .base import WindowContext
from .draft_ahead import AHEAD_LOOKAHEAD, AHEAD_MIN_READY, DraftAhead
from .draft_cost import DraftModelStats, decoder_step_ms, draft_model_estimate
from .draft_decoder import DraftDecoder, draft_encoder_input
from .draft_load import DraftModel, load_draft_model

REPROBE_EVERY = 16  # a refused draft model still runs on the 16th window, to keep its measurements fresh,
REPROBE_MAX = 256  # then after twice as many each time a re-measured model is refused again, up to this


class DraftModelDrafter:
    """Drafts with a small Whisper; see module docstring.

    ``DraftModelDrafter("tiny.en", engine.tokenizer)`` or with a directory. Acceptance by
    position and the draft model's costs accumulate in ``stats``. ``ahead=True`` runs the draft
    model on its own thread (see ``DraftAhead``): proposing then costs the main loop nothing but
    the drafts that are already there.
    """

    name = "draft_model"
    costly = True  # proposing runs a model: shadow replay (single-row windows) should skip it

    def __init__(self, draft_dir_or_name: str | Path | DraftModel, main_tokenizer: WhisperTokenizer,
                 device: str = "cpu", compute_type: str = "int8", threads: int = 2, *,
                 main_model_dir: str | Path | None = None, main_device: str | None = None,
                 max_draft_steps: int = 16, ahead: bool = False, lookahead: int = AHEAD_LOOKAHEAD,
                 min_ready: int = AHEAD_MIN_READY) -> None:
        if isinstance(draft_dir_or_name, DraftModel):
            self.draft = draft_dir_or_name
        else:
            self.draft = load_draft_model(draft_dir_or_name, main_tokenizer, main_model_dir=main_model_dir,
                                          device=device, main_device=main_device, compute_type=compute_type,
                                          threads=1 if ahead else threads)
        self.lm = self.draft.lm
        self.remap = self.draft.remap
        self._eot = self.lm.tokenizer.special.eot
        self.max_draft_steps = max_draft_steps
        self.enabled = True
        self.closed = False
        self.stats = DraftModelStats()
        self.off_reason = ""  # why the current window has no drafts ("" while drafting)
        self._dec = DraftDecoder(self.lm, self.stats)
        self.ahead: DraftAhead | None = DraftAhead(self._dec, self.lm, lookahead, min_ready) if ahead else None
        self._last_proposed = 0
        self._refused = 0  # windows refused in a row (see worth_running)
        self._reprobe_after = REPROBE_EVERY  # refusals before the next re-measuring window

    @property
    def drafting(self) -> bool:
        """Whether the next window it begins will be drafted (not refused for it, not closed): then
        its encoder and thread take the core the main decoder's wide calls would use."""
        return self.enabled and not self.closed

    # --- drafter protocol ---------------------------------------------------------------------
    def prepare(self, audio: np.ndarray) -> None:
        """Start the draft encoder on a window's audio before the main model encodes it (ahead mode
        only: the encoders then share the cores instead of the draft encoder delaying decoding)."""
        if self.ahead is not None and self.drafting:
            self.ahead.prepare(audio)

    def begin(self, window: WindowContext) -> None:
        if self.ahead is not None:
            self.ahead.stop_window()  # the thread frees the old state: only it touches the decoder
        else:
            self._dec.close()
        if not self.drafting:
            self.off_reason = "closed" if self.closed else "disabled"
            return
        if window.audio is None:
            self.off_reason = "no audio for this window"
            return
        prompt = self.remap.prompt_to_draft(window.prompt)
        if prompt is None:
            self.off_reason = "the draft model cannot follow this window's language or task"
            return
        if len(prompt) >= MAX_POSITIONS - 2:
            self.off_reason = "prompt too long for the draft model"
            return
        self.off_reason = ""
        if self.ahead is not None:
            self.ahead.start_window(window.audio, prompt)
            return
        t0 = time.perf_counter()
        encoder_output = self.lm.encode(draft_encoder_input(window.audio, self.lm.n_mels))
        self.stats.encoder_s += time.perf_counter() - t0
        self._dec.start(encoder_output, prompt)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        self._last_proposed = 0
        if k <= 0 or self.off_reason:
            return []
        self.stats.asked += 1
        target, n = self.remap.to_draft(tokens)
        if n < len(tokens):
            return []
        if self.ahead is not None:
            drafted = self.ahead.drafts_after(target, k)
        else:
            drafted = self._draft_now(target, k)
        proposal = self.remap.to_main(drafted)[0][:k]  # stops before the first id with no counterpart
        self._last_proposed = len(proposal)
        return proposal

    def _draft_now(self, target: list[int], k: int) -> list[int]:
        """Draft ids after ``target``, decoded now on this thread (serial mode)."""
        dec = self._dec
        if dec.state is None or dec.room(len(target) - len(dec.fed)) < 1:
            return []
        dec.sync(target)
        limit = min(self.max_draft_steps, dec.room(), 2 * k + 2)
        drafted: list[int] = []
        while dec.pred is not None:
            drafted.append(dec.pred)
            mapped, ok = self.remap.to_main(drafted)
            if ok < len(drafted) or dec.pred == self._eot or len(mapped) >= k or len(drafted) >= limit:
                break
            dec.feed([dec.pred])
        return drafted

    def observe(self, n_accepted: int) -> None:
        """Bookkeeping only: the rollback happens in the next ``propose``, which sees the corrected tokens."""
        if self._last_proposed:
            self.stats.record(self._last_proposed, min(n_accepted, self._last_proposed))
            self._last_proposed = 0

    def end(self, tokens: Sequence[int]) -> None:
        if self.ahead is not None:
            self.ahead.stop_window()
        else:
            self._dec.close()

    def close(self) -> None:
        """Stop the ahead thread and wait for it to end (dropping the drafter stops it too). A
        closed drafter drafts nothing: an engine used after ``close()`` still transcribes exactly."""
        self.closed = True
        if self.ahead is not None:
            self.ahead.shutdown()

    # --- state keeping ------------------------------------------------------------------------
    @property
    def held_tokens(self) -> list[int]:
        """Draft ids the decoder state holds after the prompt."""
        return list(self._dec.fed)

    @property
    def state_step(self) -> int:
        """Positions in the draft decoder state (prompt included); 0 between windows."""
        return self._dec.state.current_step if self._dec.state is not None else 0

    # --- cost --------------------------------------------------------------------------------
    def calibrate(self, steps: int = 8) -> float:
        """Draft step time in ms, measured once if no real steps were timed yet."""
        if self.stats.calls >= steps:
            return self.stats.step_ms
        if getattr(self, "_calibrated_ms", None) is None:
            self._calibrated_ms = decoder_step_ms(self.lm, steps)
        return self._calibrated_ms

    def worth_running(self, main_step_ms: float, verify_cost: VerifyCost, row_floor: int = 2,
                      tokens_per_window: float = 40.0, draft_encoder_ms: float | None = None,
                      margin: float = SPECULATE_MARGIN) -> tuple[bool, int, str]:
        """Whether drafting with this model is expected to beat greedy, the best K, and why.

        The estimate from this drafter's measurements is ``draft_cost.draft_model_estimate``'s.
        Refused ``REPROBE_EVERY`` times in a row, it runs once more, so that a changed measurement
        can change the answer; each time it is refused again after that, the next re-measuring
        window comes twice as late (up to ``REPROBE_MAX``): on a CPU where it never pays (the Intel
        Xeon: estimates 0.55-0.63x against 1.33x without it) every re-measuring window is one
        decoded slower, with the draft model's encoder beside the main one and one-thread calls.
        """
        k, speedup, why = draft_model_estimate(self.stats, self.calibrate(), main_step_ms, verify_cost, row_floor,
                                               tokens_per_window, draft_encoder_ms, ahead=self.ahead is not None)
        ok = speedup >= margin
        self._refused = 0 if ok else self._refused + 1
        if ok:
            self._reprobe_after = REPROBE_EVERY
        elif self._refused >= self._reprobe_after:
            self._refused, ok = 0, True
            self._reprobe_after = min(2 * self._reprobe_after, REPROBE_MAX)
            why += "; run once more to re-measure"
        return ok, k, why


def open_draft_drafter(draft: str | Path, main_tokenizer: WhisperTokenizer, *, on_error: str = "warn",
                       **kwargs) -> DraftModelDrafter | None:
    """``DraftModelDrafter`` or, when the draft model is unusable and ``on_error="warn"``, a warning and None.

    Drafting never changes text, so transcribing without an unusable draft model is always safe;
    a name or folder that is no model at all is a mistake to say at once (``UnknownModelError``
    naming ``draft_model``), not a warning lost in a log while every file runs slower.
    """
    try:
        return DraftModelDrafter(draft, main_tokenizer, **kwargs)
    except UnknownModelError as exc:
        raise UnknownModelError(f"unknown draft model {str(draft)!r}", where=option_where("draft_model"),
                                hint=exc.hint) from None
    except SpecWhisperError as exc:
        if on_error != "warn":
            raise
        warnings.warn(f"draft model not used (drafting with it is off): {exc.message()}", stacklevel=2)
        return None

