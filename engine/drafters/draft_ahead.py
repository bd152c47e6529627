"""The ahead thread: a draft model decoding on a core of its own, ahead of the main model.

On CPU the main decoder runs on one core and leaves the other idle; ``DraftAhead`` puts the
draft model's encoder and decoder there, so its steps leave the main loop's critical path. A
thread with its locking, generations and finalizer is a room of its own: the drafter only hands
it windows and targets and reads back the drafts that are ready.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

from ..backend import LoadedModel
from .draft_decoder import DraftDecoder, draft_encoder_input

AHEAD_LOOKAHEAD = 8  # draft ids the ahead thread decodes beyond what the main model confirmed
AHEAD_MIN_READY = 1  # drafts a round waits for (at most AHEAD_WAIT_S) when the ahead thread is behind
AHEAD_WAIT_S = 0.03
IDLE_WAKE_S = 5.0  # the idle ahead thread re-checks its DraftAhead this often (a safety net: drops notify it)


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
    def prepare(self, audio: np.ndarray) -> None:
        with self._cv:
            self._prepare = audio
            self._cv.notify_all()

    def start_window(self, audio: np.ndarray, prompt: list[int]) -> None:
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

    def _next_job(self) -> Callable[[], None] | None:
        """(Under the lock.) The next unit of work (None: none now)."""
        if not self._wants_work():
            return None
        self._busy = True
        return self._take_job()

    def _run_job(self, job: Callable[[], None]) -> None:
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

    def _take_job(self) -> Callable[[], None]:
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

    def _encode(self, audio: np.ndarray) -> None:
        t0 = time.perf_counter()
        self._encoded = (audio, self._lm.encode(draft_encoder_input(audio, self._lm.n_mels)))
        self._dec.stats.encoder_s += time.perf_counter() - t0

    def _begin(self, gen: int, audio: np.ndarray, prompt: list[int]) -> None:
        encoded = self._encoded
        self._encoded = None
        if encoded is None or encoded[0] is not audio:
            self._encode(audio)
            encoded, self._encoded = self._encoded, None
        self._dec.start(encoded[1], prompt)
        self._active = gen


def _ahead_loop(ref: weakref.ref[DraftAhead], cv: threading.Condition) -> None:
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
