"""Several windows decoded in lockstep on the invariant decoder: one call feeds them all.

A 1-row decoder step is bound by reading the weights, not by arithmetic: on 2 cores a call of
8 rows costs about two 1-row steps. faster-whisper's batched pipeline exploits that by decoding
its chunks as rows of one batch; windows that do not depend on each other (no previous text, no
timestamps to seek by) can do the same here. Each window keeps its own loop in its own thread;
its prompt is decoded as it would be alone, and its later calls meet the other windows' at a
``LockstepGate``, which waits until every window in flight has asked, then runs one call of the
step graph with each window in a slot of a shared cache block (``invariant_graph``: per-row
operations see all rows as one matrix, attention reads each slot's own cache and encoder output).

Nothing numeric changes: the invariant decoder computes a row alike in any call of 1 to
``row_ceiling`` rows (checked bitwise by the self-test, on both of its sessions, before any window
uses it), and a lockstep call holds one row per window, so a window's tokens are the same in a
batch of 8, a batch of 1, or alone with speculation (``tests/test_whisper_model.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .invariant_decoder import InvariantDecoder, InvariantDecoderState, cache_block, grow_caches


class LockstepGate:
    """Up to ``slots`` windows' decoder calls, run together (see module docstring)."""

    def __init__(self, decoder: InvariantDecoder, slots: int, frames: int) -> None:
        """``frames``: the encoder output length of every window decoded here. Every call runs
        on the decoder's wide session: nothing runs beside a lockstep batch, and lockstep is
        used only where that session's rows are the same bits as the 1-thread one's."""
        self.decoder = decoder
        self.feeds = cache_block(decoder.shape, slots, frames=frames, positions=decoder.cache_step)
        self.frames = frames
        self._free = list(range(slots))
        self._active: set[int] = set()
        self._pending: dict[int, tuple] = {}
        self._results: dict[int, np.ndarray | BaseException] = {}
        self._cond = threading.Condition()
        self.calls = 0  # step-graph calls run
        self.rows = 0  # rows asked for in them (padding and free slots excluded)

    def join(self, encoder_output, prompt: Sequence[int], rows: Sequence[int]) -> tuple[InvariantDecoderState, np.ndarray]:
        """A new window: its prompt's call made outside the gate, exactly as a window decoded
        alone makes it (a block of one, the wide session), then its cache and cross-attention
        inputs copied into a free slot. So a lockstep call holds one row per window (at most
        ``slots`` rows, within the self-test's range), and a failed prefill holds no slot."""
        with self._cond:  # under the gate's lock: never beside a lockstep call (both take the 2 cores)
            alone, logits = self.decoder.prefill_rows(encoder_output, prompt, rows)
            frames = alone.feeds["cross_k_0"].shape[2]
            if frames != self.frames:
                raise ValueError(f"a window of {frames} encoder frames in a lockstep batch of {self.frames}")
            n = alone.current_step
            if not self._free:
                raise RuntimeError("more windows in flight than lockstep slots")
            slot = min(self._free)
            self._free.remove(slot)
            grow_caches(self.feeds, n, self.decoder.cache_step, self.decoder.shape.max_positions)
            for name, value in alone.feeds.items():
                if name.startswith("cross_"):
                    self.feeds[name][slot] = value[0]
                elif name.startswith("past_k_"):
                    self.feeds[name][slot, :, :n] = value[0, :, :n]
                elif name.startswith("past_v_"):
                    self.feeds[name][slot, :, :, :n] = value[0, :, :, :n]
            self._active.add(slot)
        state = InvariantDecoderState(self.feeds, slot, self.decoder.shape.max_positions, self.decoder.shape.layers,
                                      gate=self)
        state.current_step = n
        return state, logits

    def leave(self, state: InvariantDecoderState) -> None:
        """The window is done with its slot; the others no longer wait for it."""
        with self._cond:
            if state.slot in self._active:
                self._active.discard(state.slot)
                self._free.append(state.slot)
                if self._pending and len(self._pending) == len(self._active):
                    self._run()

    def call(self, state: InvariantDecoderState, tokens: list[int], rows: list[int]) -> np.ndarray:
        """This window's call, run once every window in flight has asked for one."""
        with self._cond:
            self._pending[state.slot] = (state, tokens, rows)
            if len(self._pending) == len(self._active):
                self._run()
            while state.slot not in self._results:
                self._cond.wait()
            result = self._results.pop(state.slot)
        if isinstance(result, BaseException):
            raise result
        return result

    def _run(self) -> None:
        """One step-graph call for every pending window (the gate's lock held: all wait anyway)."""
        calls = list(self._pending.values())
        self._pending.clear()
        decoder = self.decoder
        try:
            logits = decoder.run_calls(self.feeds, max(self._active) + 1, calls, decoder._wide)
        except BaseException as exc:  # every waiting window raises it
            logits = [exc] * len(calls)
        self.calls += 1
        self.rows += sum(len(tokens) for _, tokens, _ in calls)
        for (state, _, _), result in zip(calls, logits):
            self._results[state.slot] = result
        self._cond.notify_all()


class GatedDecoder:
    """The invariant decoder as one window thread sees it: its prefill joins the gate (leaving the
    slot of this thread's previous window), every call goes through the gate; ``release()`` when
    the window is decoded."""

    def __init__(self, gate: LockstepGate) -> None:
        self._gate = gate
        self._state: InvariantDecoderState | None = None

    # ``wide`` is the step API's; here the gate chooses the session for every window at once.
    def prefill(self, encoder_output, prompt: Sequence[int], wide=None):
        return self.prefill_rows(encoder_output, prompt, [len(prompt) - 1])

    def prefill_rows(self, encoder_output, prompt: Sequence[int], rows: Sequence[int], wide=None):
        self.release()
        self._state, logits = self._gate.join(encoder_output, prompt, rows)
        return self._state, logits

    def release(self) -> None:
        if self._state is not None:
            self._gate.leave(self._state)
            self._state = None

    def __getattr__(self, name: str):  # forward_step, forward_batch, their greedy forms, compute_type
        return getattr(self._gate.decoder, name)
