"""A Whisper decoder on ONNX Runtime whose logits for a token do not depend on the call's rows.

It offers the fork's step API (``prefill``, ``forward_step[_greedy]``, ``forward_batch[_greedy]``,
a state with ``current_step`` and ``truncate_to_step``), so the verifier drives it as it drives
CTranslate2. See ``invariant_graph`` for why its rows are computed alike in any call; the
self-test in ``backend`` checks that bitwise on each machine before it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .backend import to_host
from .errors import ModelError
from .invariant_graph import DecoderShape, built_graphs, kept_graphs
from .ort_session import cpu_session_options


def _ort():
    try:
        import onnxruntime
    except ImportError:
        raise ModelError("the invariant decoder needs onnxruntime", where="python environment",
                         hint="pip install onnxruntime onnx (dependencies of specwhisper on Linux x86_64)") from None
    return onnxruntime


class InvariantDecoderState:
    """One window's decoder state: slot ``slot`` of a block of caches (per layer,
    keys [B, H, P, dh] and transposed values [B, H, dh, P], beside the cross-attention inputs
    [B, H, T, dh] and [B, H, dh, T]), P positions long (grown by ``grow_caches`` as the window
    goes on); rolling back only moves ``current_step``. A window decoded
    on its own has a block of one slot; windows decoded in lockstep share one
    (``invariant_batch``), and their calls go through its ``gate``."""

    def __init__(self, feeds: dict[str, np.ndarray], slot: int, length: int, layers: int,
                 wide: Callable[[], bool] | None = None, gate=None) -> None:
        """``wide``: asked before each call whether the CPU is free for it (then it runs on all the
        decoder's threads)."""
        self.feeds, self.slot, self.length, self.layers = feeds, slot, length, layers
        self.wide = wide or (lambda: False)
        self.gate = gate
        self.current_step = 0

    def truncate_to_step(self, step: int) -> None:
        if not 0 <= step <= self.current_step:
            raise ValueError(f"cannot truncate to step {step} (at {self.current_step})")
        self.current_step = step


# Positions a window's caches grow by. Self-attention reads the whole cache (masked past the
# row's position), so its cost follows the cache's length, not the position: on an Intel Xeon
# (base, 2 threads) a 1-row step took 8.6 ms over 448 positions and 6.4 ms over 64. A masked
# position adds exact zeros to the softmax's sum and to the values' products, so on kernels that
# reduce in blocks of this many elements a row's bits do not depend on the length; the self-test
# checks that on each machine (``backend``) and keeps full-length caches where it fails.
CACHE_STEP = 64


class CacheBlock(dict):
    """A block's feeds (name -> array: caches and cross-attention inputs), and the ONNX Runtime IO
    bindings made for them, one per session and slot count: binding the block's 24 arrays
    again for every call cost about 0.8 ms of a 5-6 ms step here. A binding is made again
    where an array was replaced (``grow_caches``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.bindings: dict[tuple[int, int], tuple[list[tuple[str, np.ndarray]], list, object]] = {}


def cache_block(shape: DecoderShape, slots: int, cross: dict[str, np.ndarray] | None = None,
                frames: int | None = None, positions: int | None = None) -> CacheBlock:
    """Feeds of ``slots`` windows: zeroed caches of ``positions`` (default: the model's maximum),
    and the cross-attention inputs (a window's own, as a block of one, or zeroed ones of
    ``frames`` encoder frames to be filled per slot)."""
    heads, dh = shape.heads, shape.d_model // shape.heads
    length = positions or shape.max_positions
    feeds = CacheBlock()
    for i in range(shape.layers):
        feeds[f"past_k_{i}"] = np.zeros((slots, heads, length, dh), np.float32)
        feeds[f"past_v_{i}"] = np.zeros((slots, heads, dh, length), np.float32)
        if cross is not None:
            feeds[f"cross_k_{i}"], feeds[f"cross_v_{i}"] = cross[f"cross_k_{i}"][None], cross[f"cross_v_{i}"][None]
        else:
            feeds[f"cross_k_{i}"] = np.zeros((slots, heads, frames, dh), np.float32)
            feeds[f"cross_v_{i}"] = np.zeros((slots, heads, dh, frames), np.float32)
    return feeds


def cache_length(feeds: dict[str, np.ndarray]) -> int:
    """Positions the block's caches hold now."""
    return feeds["past_k_0"].shape[2]


def grow_caches(feeds: dict[str, np.ndarray], needed: int, step: int, limit: int) -> None:
    """Widen every cache of the block (in place in ``feeds``, which its windows share) to hold
    ``needed`` positions, rounded up to ``step`` and at most ``limit``; what they hold is kept."""
    have = cache_length(feeds)
    if needed <= have:
        return
    size = min(limit, -(-needed // step) * step)
    for name, value in list(feeds.items()):
        if name.startswith("past_k_"):
            grown = np.zeros(value.shape[:2] + (size,) + value.shape[3:], np.float32)
            grown[:, :, :have] = value
        elif name.startswith("past_v_"):
            grown = np.zeros(value.shape[:3] + (size,), np.float32)
            grown[..., :have] = value
        else:
            continue
        feeds[name] = grown


class InvariantDecoder:
    """The decoder graphs of one model on ONNX Runtime, ``threads`` intra-op threads."""

    def __init__(self, model_dir: Path, threads: int = 1, precision: str = "int8", cross_threads: int | None = None,
                 graph: str = "paired") -> None:
        """``threads``: intra-op threads of the decoder's calls; ``cross_threads``: of a window's
        first call (its cross-attention keys and values and its prompt: large GEMMs, like the
        encoder's; default ``threads``), and of its later calls while nothing else runs beside them (``wide``:
        a 1-row step took 4.4 ms on 2 threads against 6.5 on 1 here). Whether a row comes out the
        same bits on either thread count is the self-test's to check (``backend``). ``graph``: see
        ``invariant_graph.build_graphs``."""
        ort = _ort()
        self.graph = graph

        def session(graph: Path | bytes, n_threads: int, spin_in_calls: bool = False):
            source = str(graph) if isinstance(graph, Path) else graph
            options = cpu_session_options(ort, n_threads, sequential=True, spin_in_calls=spin_in_calls)
            return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])

        # Kept files that do not load (damaged) are generated again; freshly generated ones once only.
        kept = kept_graphs(model_dir, precision, graph)
        for graphs in (kept, None) if kept is not None else (None,):
            window, step, self.shape = graphs or built_graphs(model_dir, precision, graph)
            try:
                self._window = session(window, cross_threads or threads)
                # A step is ~290 small operators: its pool threads spin while it runs (``ort_session``).
                self._step = session(step, threads, spin_in_calls=True)
                self._wide = self._step if (cross_threads or threads) == threads else \
                    session(step, cross_threads, spin_in_calls=True)
                break
            except Exception as exc:  # onnxruntime raises its own exception types
                if graphs is None:
                    raise ModelError(f"ONNX Runtime cannot load the decoder graphs: {exc}", where=str(model_dir),
                                     hint="check the onnxruntime installation") from None
        self._window_outputs = [o.name for o in self._window.get_outputs()]
        self.compute_type = precision
        # Positions the caches grow by (``CACHE_STEP``); the model's maximum keeps them full-length
        # (where the self-test finds rows that differ with the cache's length).
        self.cache_step = CACHE_STEP

    def widened(self) -> _Widened:
        """This decoder with every window's calls on its wide session (for pricing them)."""
        return _Widened(self)

    # --- the fork's step API -------------------------------------------------------------------
    def prefill(self, encoder_output, prompt: Sequence[int], wide: Callable[[], bool] | None = None):
        return self.prefill_rows(encoder_output, prompt, [len(prompt) - 1], wide)

    def prefill_rows(self, encoder_output, prompt: Sequence[int], rows: Sequence[int],
                     wide: Callable[[], bool] | None = None):
        """``prefill`` returning the logits of the prompt's ``rows`` (the fork's gives the last
        row's only): the row after SOT gives ``<|nospeech|>`` without a second call. One call of
        the window graph on ``cross_threads``; ``wide``: see ``InvariantDecoderState``."""
        n = len(prompt)
        if not 0 < n <= self.shape.max_positions:
            raise ValueError(f"a prompt of {n} tokens (the decoder holds 1 to {self.shape.max_positions})")
        enc = to_host(encoder_output).astype(np.float32, copy=False)  # CUDA storage is copied first
        out = dict(zip(self._window_outputs, self._window.run(self._window_outputs, {
            "encoder_output": np.ascontiguousarray(enc.reshape(-1, enc.shape[-1])),
            "tokens": np.asarray(prompt, np.int64), "positions": np.arange(n, dtype=np.int64),
            "mask": np.triu(np.full((n, n), -np.inf, np.float32), 1), "logit_rows": np.asarray(rows, np.int64)})))
        feeds = cache_block(self.shape, 1, out, positions=self.cache_step)
        grow_caches(feeds, n, self.cache_step, self.shape.max_positions)
        for i in range(self.shape.layers):
            feeds[f"past_k_{i}"][0, :, :n] = out[f"new_k_{i}"]
            feeds[f"past_v_{i}"][0, :, :, :n] = out[f"new_v_{i}"]
        state = InvariantDecoderState(feeds, 0, self.shape.max_positions, self.shape.layers, wide)
        state.current_step = n
        return state, out["logits"]

    def forward_step(self, state: InvariantDecoderState, token: int) -> np.ndarray:
        return self._call(state, [token])

    def forward_batch(self, state: InvariantDecoderState, tokens: Sequence[int]) -> np.ndarray:
        return self._call(state, list(tokens))[None]

    def forward_step_greedy(self, state: InvariantDecoderState, token: int, suppress: Sequence[int] = ()) -> int:
        return self.forward_batch_greedy(state, [token], suppress)[0]

    def forward_batch_greedy(self, state: InvariantDecoderState, tokens: Sequence[int],
                             suppress: Sequence[int] = ()) -> list[int]:
        logits = self._call(state, list(tokens))
        if len(suppress):
            logits[:, suppress] = -np.inf
        return [int(i) for i in logits.argmax(axis=1)]

    def _call(self, state: InvariantDecoderState, tokens: list[int], logit_rows: Sequence[int] | None = None,
              session=None) -> np.ndarray:
        """Feed ``tokens`` at the state's next positions; the logits of ``logit_rows`` (default: all)."""
        if state.current_step + len(tokens) > state.length:
            raise ValueError(f"decoder positions exhausted ({state.current_step} + {len(tokens)} > {state.length})")
        rows = list(range(len(tokens))) if logit_rows is None else list(logit_rows)
        if state.gate is not None:
            logits = state.gate.call(state, tokens, rows)
        else:
            session = session or (self._wide if state.wide() else self._step)
            logits = self.run_calls(state.feeds, 1, [(state, tokens, rows)], session)[0]
        state.current_step += len(tokens)
        return logits

    def run_calls(self, feeds: CacheBlock, slots: int, calls: list[tuple], session=None) -> list[np.ndarray]:
        """One call of the step graph on the first ``slots`` slots of a block: ``calls`` are
        (state, tokens, logit rows) of distinct slots; a slot with fewer rows than the longest
        call repeats its last row (the same token at the same position: the same key and value
        bits written twice), and a slot without a call (a free one) feeds rows at position 0, written
        into its cache there (a slot's prefill writes its prompt from position 0 on). Each call's
        new keys and values are written into its slot's cache at its positions; returns each call's
        logits."""
        session = session or self._step
        by_slot = {state.slot: (state, tokens, rows) for state, tokens, rows in calls}
        width = max(len(tokens) for _, tokens, _ in calls)
        grow_caches(feeds, max(state.current_step + len(tokens) for state, tokens, _ in calls), self.cache_step,
                    self.shape.max_positions)
        length = cache_length(feeds)
        token_rows = np.zeros((slots, width), np.int64)
        positions = np.zeros((slots, width), np.int64)
        wanted: list[int] = []
        for slot in range(slots):
            state, tokens, rows = by_slot.get(slot, (None, [0], []))
            start = state.current_step if state is not None else 0
            token_rows[slot, :len(tokens)] = tokens
            token_rows[slot, len(tokens):] = tokens[-1]
            positions[slot] = np.minimum(start + np.minimum(np.arange(width), len(tokens) - 1), length - 1)
            wanted += [slot * width + r for r in rows]
        mask = np.where(np.arange(length)[None, None, :] <= positions[:, :, None], 0.0, -np.inf).astype(np.float32)
        logits = self._run_in_place(session, feeds, slots, {"tokens": token_rows, "positions": positions,
                                                             "logit_rows": np.asarray(wanted, np.int64), "mask": mask})
        first_row, begin = {}, 0
        for slot in sorted(by_slot):
            first_row[slot] = begin
            begin += len(by_slot[slot][2])
        return [logits[first_row[state.slot]:first_row[state.slot] + len(rows)] for state, _, rows in calls]

    def _run_in_place(self, session, feeds: CacheBlock, slots: int, call: dict[str, np.ndarray]) -> np.ndarray:
        """Run the step graph on the block's first ``slots`` slots with each cache bound as both
        its input and its output (``cache_k_i``/``cache_v_i``): the graph's scatter writes the
        call's keys and values into ``feeds`` in place (the same values it attends over); the
        logits come back."""
        binding = self._binding(session, feeds, slots)
        for name, value in call.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("logits")  # a new array each call: callers keep logits
        session.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()

    @staticmethod
    def _binding(session, feeds: CacheBlock, slots: int):
        """``session``'s binding of the block's arrays (kept on the block while they stay)."""
        kept = feeds.bindings
        entry = kept.get((id(session), slots))
        if entry is not None and all(feeds.get(name) is array for name, array in entry[0]):
            return entry[2]
        for stale in [key for key, (arrays, _, _) in kept.items() if any(feeds.get(n) is not a for n, a in arrays)]:
            del kept[stale]  # bound to arrays the block no longer holds
        ort = _ort()
        binding = session.io_binding()
        binding.bind_output("logits")  # the first output (rebinding a name keeps its place)
        arrays, values = list(feeds.items()), []
        for name, value in arrays:
            value = value if value.shape[0] == slots else value[:slots]  # a leading slice: the same memory
            shared = ort.OrtValue.ortvalue_from_numpy(value)  # the array's memory, not a copy
            binding.bind_ortvalue_input(name, shared)
            if name.startswith("past_"):
                binding.bind_ortvalue_output(name.replace("past_", "cache_"), shared)
            values.append(shared)
        kept[(id(session), slots)] = (arrays, values, binding)  # the arrays and values stay alive with it
        return binding


class _Widened:
    """An ``InvariantDecoder`` whose windows run wide: the same step API, prefill with ``wide`` set."""

    def __init__(self, decoder: InvariantDecoder) -> None:
        self._decoder = decoder

    def prefill(self, encoder_output, prompt: Sequence[int]):
        return self._decoder.prefill(encoder_output, prompt, wide=lambda: True)

    def __getattr__(self, name: str):
        return getattr(self._decoder, name)
