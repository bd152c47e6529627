"""Draft-model drafter: a small Whisper decodes a few tokens greedily ahead of the main model.

Per window the draft model runs its own encoder once (its own log-mel from the window's audio,
so 80- and 128-bin models can pair) and prefills its own prompt. Then it keeps one decoder state
for the whole window: each ``propose`` maps the main model's emitted tokens into the draft
vocabulary, rolls the state back to the longest prefix it already holds (``truncate_to_step``),
feeds the rest in one batched call, and decodes ahead. Nothing is re-prefilled or cloned.

The draft model's numerics do not matter for exactness (the main model verifies every token),
only for speed. On CPU a draft model rarely pays: see ``policy.draft_model_expected_speedup``
and ``DraftModelDrafter.worth_running``, which the engine should ask before each window.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backend import MAX_POSITIONS, LoadedModel, step_api_available, to_host
from ..errors import ModelError, SpecWhisperError, TokenMapError
from ..features import content_frames, log_mel_spectrogram, window_features
from ..policy import SPECULATE_MARGIN, VerifyCost, draft_model_best_k
from ..tokenizer import WhisperTokenizer
from .base import WindowContext
from .vocab_remap import VocabRemap

ACCEPT_PRIOR = 0.7  # per-position acceptance assumed before a draft model has been measured


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


@dataclass
class DraftModel:
    """A validated draft model: loaded weights plus the remap to the main vocabulary."""

    lm: LoadedModel
    remap: VocabRemap
    model_dir: Path


def load_draft_model(draft: str | Path, main_tokenizer: WhisperTokenizer, *, main_model_dir: str | Path | None = None,
                     device: str = "cpu", main_device: str | None = None, compute_type: str = "int8",
                     threads: int = 2, download: bool = True) -> DraftModel:
    """Resolve, validate and load a draft model for a main model with ``main_tokenizer``.

    Errors (``SpecWhisperError``): missing or broken files, a tokenizer that is not Whisper's
    byte-level BPE, an unknown or absent device, a CTranslate2 without the step API, a draft
    whose model.bin is not smaller than the main model's. Warning: a draft on another device
    than the main model (it works, but every round crosses devices).
    """
    from ..model_store import resolve_model

    if device not in ("cpu", "cuda"):
        raise ModelError(f"unknown draft device {device!r}", where="--draft-device", hint="use cpu or cuda")
    if threads < 1:
        raise ModelError(f"draft threads must be >= 1, got {threads}", where="--draft-model")
    try:
        # Stored like the main model (the store keeps int8 copies), so model.bin sizes compare.
        draft_dir = resolve_model(draft, download=download, prefer_int8=compute_type.startswith("int8"))
        tokenizer = WhisperTokenizer.from_model_dir(draft_dir)
    except SpecWhisperError as exc:
        raise type(exc)(f"draft model: {exc.what}", where=exc.where or str(draft), hint=exc.hint) from None
    main_dir = Path(main_model_dir) if main_model_dir is not None else Path(main_tokenizer.source).parent
    main_bin, draft_bin = main_dir / "model.bin", draft_dir / "model.bin"
    if main_bin.is_file() and draft_bin.stat().st_size >= main_bin.stat().st_size:
        raise ModelError(f"draft model ({draft_bin.stat().st_size / 1e6:.0f} MB) is not smaller than the main model "
                         f"({main_bin.stat().st_size / 1e6:.0f} MB): it would be slower than decoding without it",
                         where=str(draft_dir), hint="use a smaller draft model (e.g. tiny.en for base), or none")
    if main_device is not None and device != main_device:
        warnings.warn(f"draft model on {device} while the main model is on {main_device}: every round crosses "
                      "devices, which usually costs more than drafting saves", stacklevel=2)
    if not step_api_available():
        raise ModelError("this CTranslate2 build has no step API (prefill/forward_step): a draft model cannot run",
                         where="python environment", hint="install ctranslate2-crisperwhisper, or drop --draft-model")
    remap = VocabRemap(main_tokenizer, tokenizer, _stored_map(main_dir, main_tokenizer, tokenizer))
    try:
        lm = LoadedModel(draft_dir, device=device, compute_type=compute_type, threads=threads)
    except SpecWhisperError as exc:
        raise type(exc)(f"draft model: {exc.what}", where=exc.where, hint=exc.hint) from None
    return DraftModel(lm=lm, remap=remap, model_dir=draft_dir)


def _stored_map(main_dir: Path, main: WhisperTokenizer, draft: WhisperTokenizer):
    """The converter's remap table stored beside the main model, if it fits; else None (built on load)."""
    if main.fingerprint() == draft.fingerprint():
        return None
    from specwhisper.converters.vocab_map import load_vocab_map, vocab_map_path

    path = vocab_map_path(main_dir, draft.fingerprint())
    if not path.is_file():
        return None
    try:
        return load_vocab_map(path, main, draft)
    except TokenMapError as exc:
        warnings.warn(f"ignoring stored vocabulary map, rebuilding it in memory: {exc.what} ({path})", stacklevel=3)
        return None


class DraftModelDrafter:
    """Drafts with a small Whisper; see module docstring.

    ``DraftModelDrafter("tiny.en", engine.tokenizer)`` or with a directory. Acceptance by
    position and the draft model's costs accumulate in ``stats``.
    """

    name = "draft_model"
    costly = True  # proposing runs a model: shadow replay (single-row windows) should skip it

    def __init__(self, draft_dir_or_name: str | Path | DraftModel, main_tokenizer: WhisperTokenizer,
                 device: str = "cpu", compute_type: str = "int8", threads: int = 2, *,
                 main_model_dir: str | Path | None = None, main_device: str | None = None,
                 max_draft_steps: int = 16) -> None:
        if isinstance(draft_dir_or_name, DraftModel):
            self.draft = draft_dir_or_name
        else:
            self.draft = load_draft_model(draft_dir_or_name, main_tokenizer, main_model_dir=main_model_dir,
                                          device=device, main_device=main_device, compute_type=compute_type,
                                          threads=threads)
        self.lm = self.draft.lm
        self.remap = self.draft.remap
        self._model = self.lm.decoder
        self._suppress = self.lm.suppress
        self._suppress_first = sorted(set(self.lm.suppress) | set(self.lm.suppress_begin))
        self._eot = self.lm.tokenizer.special.eot
        self.max_draft_steps = max_draft_steps
        self.enabled = True
        self.stats = DraftModelStats()
        self.off_reason = ""  # why the current window has no drafts ("" while drafting)
        self._state = None
        self._prompt_len = 0
        self._fed: list[int] = []  # draft ids in the state after the prompt
        self._pred: int | None = None  # draft model's next token after ``_fed`` (None: unknown)
        self._first: int | None = None  # its first token after the prompt
        self._last_proposed = 0

    # --- drafter protocol ---------------------------------------------------------------------
    def begin(self, window: WindowContext) -> None:
        self._state = None
        self._fed = []
        self._pred = self._first = None
        if not self.enabled:
            self.off_reason = "disabled"
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
        t0 = time.perf_counter()
        mel = log_mel_spectrogram(np.asarray(window.audio, dtype=np.float32), n_mels=self.lm.n_mels)
        encoder_output = self.lm.encode(window_features(mel[:, :content_frames(mel)], 0))
        t1 = time.perf_counter()
        self._state, logits = self._model.prefill(encoder_output, prompt)
        scores = to_host(logits).reshape(-1).astype(np.float32, copy=True)
        scores[self._suppress_first] = -np.inf
        self._first = self._pred = int(scores.argmax())
        self._prompt_len = len(prompt)
        self.stats.windows += 1
        self.stats.encoder_s += t1 - t0
        self.stats.prefill_s += time.perf_counter() - t1
        self.off_reason = ""

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        self._last_proposed = 0
        if self._state is None or k <= 0:
            return []
        target, n = self.remap.to_draft(tokens)
        room = MAX_POSITIONS - self._prompt_len - len(target) - 1
        if n < len(tokens) or room < 1:
            return []
        self._sync(target)
        drafted: list[int] = []
        mapped: list[int] = []
        limit = min(self.max_draft_steps, room, 2 * k + 2)
        while True:
            d = self._pred
            if d is None:
                break
            drafted.append(d)
            candidate, ok = self.remap.to_main(drafted)
            if ok < len(drafted):  # no counterpart in the main vocabulary: draft up to here
                break
            mapped = candidate
            if d == self._eot or len(mapped) >= k or len(drafted) >= limit:
                break
            self._feed([d])
        proposal = mapped[:k]
        self._last_proposed = len(proposal)
        return proposal

    def observe(self, n_accepted: int) -> None:
        """Bookkeeping only: the rollback happens in the next ``propose``, which sees the corrected tokens."""
        if self._last_proposed:
            self.stats.record(self._last_proposed, min(n_accepted, self._last_proposed))
            self._last_proposed = 0

    def end(self, tokens: Sequence[int]) -> None:
        self._state = None  # frees the window's KV cache
        self._fed = []

    # --- state keeping ------------------------------------------------------------------------
    @property
    def held_tokens(self) -> list[int]:
        """Draft ids the decoder state holds after the prompt."""
        return list(self._fed)

    @property
    def state_step(self) -> int:
        """Positions in the draft decoder state (prompt included); 0 between windows."""
        return self._state.current_step if self._state is not None else 0

    def _sync(self, target: list[int]) -> None:
        """Make the state hold exactly ``target`` after the prompt, with the prediction that follows."""
        fed = self._fed
        common = 0
        limit = min(len(fed), len(target))
        while common < limit and fed[common] == target[common]:
            common += 1
        if common < len(fed):
            self._state.truncate_to_step(self._prompt_len + common)
            del fed[common:]
            self._pred = None
            self.stats.rollbacks += 1
        todo = target[common:]
        if not todo and self._pred is None:
            if fed:  # the prediction after the kept prefix is gone: feed its last token again
                self._state.truncate_to_step(self._prompt_len + len(fed) - 1)
                todo = [fed.pop()]
            else:
                self._pred = self._first
        if todo:
            self._feed(todo)

    def _feed(self, tokens: list[int]) -> None:
        t0 = time.perf_counter()
        if len(tokens) == 1:
            self._pred = int(self._model.forward_step_greedy(self._state, tokens[0], self._suppress))
        else:
            self._pred = int(self._model.forward_batch_greedy(self._state, tokens, self._suppress)[-1])
        self._fed.extend(tokens)
        self.stats.calls += 1
        self.stats.rows += len(tokens)
        self.stats.decode_s += time.perf_counter() - t0

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

        Uses measured acceptance by position (``ACCEPT_PRIOR`` before any), the draft's measured
        step time, and its encoder + prefill spread over ``tokens_per_window``.
        """
        draft_ms = self.calibrate()
        accept = self.stats.accept_by_pos() or [ACCEPT_PRIOR]
        if draft_encoder_ms is None:
            draft_encoder_ms = self.stats.encoder_ms
        fixed = draft_encoder_ms + (1000.0 * self.stats.prefill_s / self.stats.windows if self.stats.windows else 0.0)
        k, speedup = draft_model_best_k(accept, main_step_ms, draft_ms, verify_cost, row_floor,
                                        fixed / max(tokens_per_window, 1.0))
        why = (f"draft model expected speedup {speedup:.2f}x (K={k}, draft/main step {draft_ms:.1f}/{main_step_ms:.1f} ms,"
               f" acceptance {accept[0]:.2f})")
        return speedup >= margin, k, why


def open_draft_drafter(draft: str | Path, main_tokenizer: WhisperTokenizer, *, on_error: str = "warn",
                       **kwargs) -> DraftModelDrafter | None:
    """``DraftModelDrafter`` or, when the draft model is unusable and ``on_error="warn"``, a warning and None.

    Drafting never changes text, so transcribing without the draft model is always safe.
    """
    try:
        return DraftModelDrafter(draft, main_tokenizer, **kwargs)
    except SpecWhisperError as exc:
        if on_error != "warn":
            raise
        warnings.warn(f"draft model not used (drafting with it is off): {exc.message()}", stacklevel=2)
        return None


def decoder_step_ms(lm: LoadedModel, steps: int = 8) -> float:
    """Median time of a 1-row decoder step on a random full-window encoder output (no encoder run)."""
    encoder_output, prompt = lm._random_window(1500)
    state, _ = lm.decoder.prefill(encoder_output, prompt)
    token = lm.tokenizer.encode(" the")[0]
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        lm.decoder.forward_step_greedy(state, token, lm.suppress)
        times.append(time.perf_counter() - t0)
    return 1000.0 * float(np.median(times[1:]))

