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

import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..audio_ctx import SHORT_SIZES
from ..backend import MAX_POSITIONS, LoadedModel, step_api_available, to_host
from ..errors import ModelError, SpecWhisperError, TokenMapError
from ..features import N_FRAMES, content_frames, log_mel_spectrogram, short_window_features, window_features
from ..policy import SPECULATE_MARGIN, VerifyCost, draft_model_best_k, expected_tokens
from ..tokenizer import WhisperTokenizer
from .base import WindowContext
from .vocab_remap import VocabRemap

ACCEPT_PRIOR = 0.7  # per-position acceptance assumed before a draft model has been measured
DRAFT_MARGIN_FRAMES = 200  # trailing silence (mel frames) the draft encoder's short window keeps
AHEAD_LOOKAHEAD = 8  # draft ids the ahead thread decodes beyond what the main model confirmed
AHEAD_MIN_READY = 1  # drafts a round waits for (at most AHEAD_WAIT_S) when the ahead thread is behind
AHEAD_WAIT_S = 0.03
# Share of the draft encoder's time that an ahead draft model adds to a window's wall time (it
# runs beside the 2-thread main encoder). Measured, base + tiny.en: long-form 114 and 176 ms more
# main encoder per window next to a draft encoder of about 450 ms (results/bench9-longform,
# bench9-longform-policy), short real clips about 22 ms next to 30-60 ms (bench10-real-policy).
AHEAD_ENCODER_SHARE = 0.5
# What a window pays for an ahead draft model besides that (its prefill and first drafts beside the
# main prefill, the thread handovers): on 2-5-token digit clips (results/bench9-real) the decoder
# phase took about 7 ms more per clip with the draft model than single-row greedy.
AHEAD_WINDOW_MS = 8.0
IDLE_WAKE_S = 5.0  # the idle ahead thread re-checks its DraftAhead this often (a safety net: drops notify it)
REPROBE_EVERY = 16  # a refused draft model still runs on every 16th window, to keep its measurements fresh


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


class DraftDecoder:
    """The draft model's decoder state for one window: the draft ids it holds after the prompt and
    its greedy prediction after them. Rolled back with ``truncate_to_step``, never re-prefilled."""

    def __init__(self, lm: LoadedModel, stats: DraftModelStats) -> None:
        self._model = lm.decoder
        self._suppress = lm.suppress
        self._suppress_first = sorted(set(lm.suppress) | set(lm.suppress_begin))
        self.eot = lm.tokenizer.special.eot
        self.stats = stats
        self.state = None
        self.prompt_len = 0
        self.fed: list[int] = []  # draft ids in the state after the prompt
        self.pred: int | None = None  # the draft model's next token after ``fed`` (None: unknown)
        self.first: int | None = None  # its first token after the prompt

    def start(self, encoder_output, prompt: list[int]) -> None:
        t0 = time.perf_counter()
        self.state, logits = self._model.prefill(encoder_output, prompt)
        scores = to_host(logits).reshape(-1).astype(np.float32, copy=True)
        scores[self._suppress_first] = -np.inf
        self.first = self.pred = int(scores.argmax())
        self.prompt_len = len(prompt)
        self.fed = []
        self.stats.windows += 1
        self.stats.prefill_s += time.perf_counter() - t0

    def close(self) -> None:
        self.state = None  # frees the window's KV cache
        self.fed = []
        self.pred = None

    def room(self, extra: int = 0) -> int:
        """Tokens that can still be fed after ``fed`` plus ``extra``."""
        return MAX_POSITIONS - self.prompt_len - len(self.fed) - extra - 1

    def holds(self, target: Sequence[int]) -> bool:
        """Whether ``fed`` plus the prediction begins with ``target``, so that what follows drafts on."""
        chain = self.fed if self.pred is None else [*self.fed, self.pred]
        return len(chain) > len(target) and chain[:len(target)] == list(target)

    def sync(self, target: list[int]) -> None:
        """Make the state hold exactly ``target`` after the prompt, with the prediction that follows."""
        fed = self.fed
        common = 0
        limit = min(len(fed), len(target))
        while common < limit and fed[common] == target[common]:
            common += 1
        if common < len(fed):
            self.state.truncate_to_step(self.prompt_len + common)
            del fed[common:]
            self.pred = None
            self.stats.rollbacks += 1
        todo = target[common:]
        if not todo and self.pred is None:
            if fed:  # the prediction after the kept prefix is gone: feed its last token again
                self.state.truncate_to_step(self.prompt_len + len(fed) - 1)
                todo = [fed.pop()]
            else:
                self.pred = self.first
        if todo:
            self.feed(todo)

    def feed(self, tokens: list[int]) -> None:
        t0 = time.perf_counter()
        if len(tokens) == 1:
            self.pred = int(self._model.forward_step_greedy(self.state, tokens[0], self._suppress))
        else:
            self.pred = int(self._model.forward_batch_greedy(self.state, tokens, self._suppress)[-1])
        self.fed.extend(tokens)
        self.stats.calls += 1
        self.stats.rows += len(tokens)
        self.stats.decode_s += time.perf_counter() - t0


def draft_frames(n_samples: int) -> int:
    """Mel frames the draft model's encoder sees for a window of ``n_samples`` (16 kHz).

    Its numerics never reach the text (the main model verifies every draft), so a short encoder
    window is safe: it only has to draft well. ``DRAFT_MARGIN_FRAMES`` of trailing silence keep
    a short window from looping before the utterance ends (see ``audio_ctx``).
    """
    need = n_samples // 160 + DRAFT_MARGIN_FRAMES
    return next((s for s in SHORT_SIZES if s >= need), N_FRAMES)


def draft_encoder_input(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """The draft encoder's features for one window's audio (a short window where the audio is short)."""
    audio = np.asarray(audio, dtype=np.float32)
    frames = draft_frames(audio.size)
    if frames < N_FRAMES:
        return short_window_features(audio, frames, n_mels=n_mels)
    mel = log_mel_spectrogram(audio, n_mels=n_mels)
    return window_features(mel[:, :content_frames(mel)], 0)


class DraftAhead:
    """Runs a ``DraftDecoder`` on its own thread, ``lookahead`` draft ids ahead of the main model.

    On CPU the main decoder runs on one core (see ``LoadedModel``), so a second core idles while
    it decodes. There the draft model keeps decoding greedily past what the main model has
    confirmed; a round takes the drafts that are ready, and the draft model's steps leave the
    main loop's critical path: a draft model then pays wherever its drafts are right often
    enough, whatever its step costs (``policy.draft_model_expected_speedup(parallel=True)``).
    The main thread only reads a published snapshot; CTranslate2 releases the GIL in its calls.
    Drafts never reach the text unverified, so timing and races can cost speed, never tokens.
    """

    def __init__(self, dec: DraftDecoder, lm: LoadedModel, lookahead: int = AHEAD_LOOKAHEAD,
                 min_ready: int = AHEAD_MIN_READY, wait_s: float = AHEAD_WAIT_S) -> None:
        self._dec = dec
        self._lm = lm
        self.lookahead = max(1, int(lookahead))
        self.min_ready = max(0, int(min_ready))
        self.wait_s = wait_s
        self.waited_s = 0.0  # main-loop time spent waiting for drafts (summed)
        self.error = ""  # the last failure on the thread (drafting then stops for the window)
        self._cv = threading.Condition()
        self._gen = 0  # window generation: work for an older window is dropped
        self._active = -1  # generation the decoder state belongs to
        self._prepare: object | None = None  # audio whose draft encoder output to compute
        self._encoded: tuple[object, object] | None = None  # (audio, encoder output)
        self._start: tuple[int, object, list[int]] | None = None  # (generation, audio, prompt)
        self._target: tuple[int, ...] | None = None  # the main model's tokens (draft ids); None: none yet
        self._snapshot: tuple[int, tuple[int, ...]] = (-1, ())  # (generation, fed + prediction)
        self._busy = False
        self._stopping = False
        # The thread holds only a weak reference while it waits, so that an engine dropped without
        # ``close()`` frees its draft model; the finalizer then wakes the thread and joins it, so a
        # dropped engine leaves no thread behind (apps create engines for days: they must not pile up).
        self._thread = threading.Thread(target=_ahead_loop, args=(weakref.ref(self), self._cv), name="draft-ahead",
                                        daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_thread, self._cv, self._thread)

    # --- main thread -------------------------------------------------------------------------
    def prepare(self, audio) -> None:
        with self._cv:
            self._prepare = audio
            self._cv.notify_all()

    def start_window(self, audio, prompt: list[int]) -> None:
        with self._cv:
            self._gen += 1
            self._target = None
            self._start = (self._gen, audio, list(prompt))
            self._cv.notify_all()

    def stop_window(self) -> None:
        with self._cv:
            self._gen += 1
            self._start = None
            self._target = None
            self._cv.notify_all()

    def drafts_after(self, target: list[int], k: int) -> list[int]:
        """Draft ids that follow ``target`` (the main model's tokens in the draft vocabulary), as far
        as the thread has decoded them; waits briefly when fewer than ``min_ready`` are there."""
        need, wanted = min(k, self.min_ready), tuple(target)
        t0 = time.perf_counter()
        with self._cv:
            self._target = wanted
            self._cv.notify_all()
            while True:
                gen, chain = self._snapshot
                ready = list(chain[len(wanted):]) if gen == self._gen and chain[:len(wanted)] == wanted else []
                if len(ready) >= need or (not self._busy and not self._wants_work()):
                    break
                left = self.wait_s - (time.perf_counter() - t0)
                if left <= 0:
                    break
                self._cv.wait(left)
        self.waited_s += time.perf_counter() - t0
        return ready

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout_s``: a job under way, one draft-model
        call, finishes first), so that nothing of the draft model runs once this returns."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # --- the thread ---------------------------------------------------------------------------
    def _wants_work(self) -> bool:
        """(Under the lock.) Whether the thread has something useful to do now."""
        if self._prepare is not None or self._start is not None:
            return True
        dec = self._dec
        if self._active != self._gen:
            return dec.state is not None  # a finished window's state to free
        if dec.state is None:
            return False
        target = self._target or ()
        if not dec.holds(target):
            return dec.room(len(target) - len(dec.fed)) >= 1
        ahead = len(dec.fed) + 1 - len(target)
        return ahead < self.lookahead and dec.pred != dec.eot and dec.room() >= 1

    def _next_job(self):
        """(Under the lock.) The next unit of work (None: none now)."""
        if not self._wants_work():
            return None
        self._busy = True
        return self._take_job()

    def _run_job(self, job) -> None:
        try:
            job()
        except Exception as exc:  # a draft failure must never stop the transcription
            self.error = f"{type(exc).__name__}: {exc}"
            self._dec.close()
        with self._cv:
            self._busy = False
            dec = self._dec
            chain = tuple(dec.fed) + ((dec.pred,) if dec.pred is not None else ())
            self._snapshot = (self._active, chain) if dec.state is not None else (-1, ())
            self._cv.notify_all()

    def _take_job(self):
        """(Under the lock.) The next unit of work as a callable run without the lock."""
        if self._prepare is not None:
            audio, self._prepare = self._prepare, None
            return lambda: self._encode(audio)
        if self._start is not None:
            gen, audio, prompt = self._start
            self._start = None
            return lambda: self._begin(gen, audio, prompt)
        dec, target = self._dec, list(self._target or ())
        if self._active != self._gen:
            return dec.close
        if not dec.holds(target):
            return lambda: dec.sync(target)
        return lambda: dec.feed([dec.pred])

    def _encode(self, audio) -> None:
        t0 = time.perf_counter()
        self._encoded = (audio, self._lm.encode(draft_encoder_input(audio, self._lm.n_mels)))
        self._dec.stats.encoder_s += time.perf_counter() - t0

    def _begin(self, gen: int, audio, prompt: list[int]) -> None:
        encoded = self._encoded
        self._encoded = None
        if encoded is None or encoded[0] is not audio:
            self._encode(audio)
            encoded, self._encoded = self._encoded, None
        self._dec.start(encoded[1], prompt)
        self._active = gen


def _ahead_loop(ref: weakref.ref, cv: threading.Condition) -> None:
    """The ahead thread: run jobs while the ``DraftAhead`` lives and is not shut down. It waits
    for work without a strong reference, so that dropping the ``DraftAhead`` (its finalizer
    notifies ``cv``) ends the thread at once."""
    while True:
        with cv:
            ahead = ref()
            if ahead is None or ahead._stopping:
                return
            job = ahead._next_job()
            if job is None:
                del ahead
                cv.wait(IDLE_WAKE_S)
                continue
        ahead._run_job(job)
        del ahead, job


def _stop_thread(cv: threading.Condition, thread: threading.Thread) -> None:
    """A dropped ``DraftAhead``'s finalizer: wake its thread (which then finds it gone) and join it."""
    with cv:
        cv.notify_all()
    if thread is not threading.current_thread():
        thread.join(5.0)


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

    # --- drafter protocol ---------------------------------------------------------------------
    def prepare(self, audio: np.ndarray) -> None:
        """Start the draft encoder on a window's audio before the main model encodes it (ahead mode
        only: the encoders then share the cores instead of the draft encoder delaying decoding)."""
        if self.ahead is not None and self.enabled and not self.closed:
            self.ahead.prepare(audio)

    def begin(self, window: WindowContext) -> None:
        if self.ahead is not None:
            self.ahead.stop_window()  # the thread frees the old state: only it touches the decoder
        else:
            self._dec.close()
        if not self.enabled or self.closed:
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

        Uses measured acceptance by position (``ACCEPT_PRIOR`` before any), the draft's measured
        step time, and its encoder + prefill spread over the tokens it helps decode: at most
        ``tokens_per_window``, and where drafters asked before it (a domain token map) leave it
        few rounds, the tokens of those rounds only. Refused ``REPROBE_EVERY`` times in a row, it
        runs once more, so that a changed measurement can change the answer.
        """
        draft_ms = self.calibrate()
        accept = self.stats.accept_by_pos() or [ACCEPT_PRIOR]
        if draft_encoder_ms is None:  # before any window: a full window's encoder, or ahead a short one's
            draft_encoder_ms = self.stats.encoder_ms if self.stats.windows else main_step_ms * (8 if self.ahead else 40)
        fixed = draft_encoder_ms + (1000.0 * self.stats.prefill_s / self.stats.windows if self.stats.windows else 0.0)
        if self.ahead is not None:  # runs beside the main encoder, on the core the decoder leaves idle
            fixed = fixed * AHEAD_ENCODER_SHARE + AHEAD_WINDOW_MS
        if self.stats.windows >= 2:  # the rounds that reach it, at the tokens a round yields
            reached = self.stats.asked / self.stats.windows * expected_tokens(accept, 4)
            tokens_per_window = min(tokens_per_window, reached)
        k, speedup = draft_model_best_k(accept, main_step_ms, draft_ms, verify_cost, row_floor,
                                        fixed / max(tokens_per_window, 1.0), parallel=self.ahead is not None)
        why = (f"draft model expected speedup {speedup:.2f}x (K={k}, draft/main step {draft_ms:.1f}/{main_step_ms:.1f} ms,"
               f" acceptance {accept[0]:.2f}, {tokens_per_window:.0f} tokens a window)")
        ok = speedup >= margin
        self._refused = 0 if ok else self._refused + 1
        if self._refused >= REPROBE_EVERY:
            self._refused, ok = 0, True
            why += "; run once more to re-measure"
        return ok, k, why


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

