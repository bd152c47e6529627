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

from .errors import ModelError
from .invariant_graph import DecoderShape, build_graphs


def _ort():
    try:
        import onnxruntime
    except ImportError:
        raise ModelError("the invariant decoder needs onnxruntime", where="python environment",
                         hint="pip install onnxruntime onnx (dependencies of specwhisper on Linux x86_64)") from None
    return onnxruntime


class InvariantDecoderState:
    """One window's decoder state: per layer the cross-attention inputs and a cache of fixed length
    (keys [H, P, dh], transposed values [H, dh, P]); rolling back only moves ``current_step``."""

    def __init__(self, shape: DecoderShape, length: int, cross: dict[str, np.ndarray],
                 wide: Callable[[], bool] | None = None) -> None:
        """``wide``: asked before each call whether the CPU is free for it (then it runs on all the
        decoder's threads)."""
        heads, dh = shape.heads, shape.d_model // shape.heads
        self.wide = wide or (lambda: False)
        self.feeds: dict[str, np.ndarray] = dict(cross)
        for i in range(shape.layers):
            self.feeds[f"past_k_{i}"] = np.zeros((heads, length, dh), np.float32)
            self.feeds[f"past_v_{i}"] = np.zeros((heads, dh, length), np.float32)
        self.layers = shape.layers
        self.length = length
        self.current_step = 0

    def truncate_to_step(self, step: int) -> None:
        if not 0 <= step <= self.current_step:
            raise ValueError(f"cannot truncate to step {step} (at {self.current_step})")
        self.current_step = step


class InvariantDecoder:
    """The decoder graphs of one model on ONNX Runtime, ``threads`` intra-op threads."""

    rewinds_to_start = True  # a state truncates to step 0 (the fork's keeps at least one position)

    def __init__(self, model_dir: Path, threads: int = 1, precision: str = "int8", cross_threads: int | None = None) -> None:
        """``threads``: intra-op threads of the decoder's calls; ``cross_threads``: of the once-a-window
        cross-attention keys and values, the prompt's prefill (large GEMMs, like the encoder's;
        default ``threads``), and of a window's calls while nothing else runs beside them (``wide``:
        a 1-row step took 4.4 ms on 2 threads against 6.5 on 1 here). Whether a row comes out the
        same bits on either thread count is the self-test's to check (``backend``)."""
        ort = _ort()
        cross, step, self.shape = build_graphs(model_dir, precision)

        def session(graph: bytes, n_threads: int):
            options = ort.SessionOptions()
            options.intra_op_num_threads = n_threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])

        try:
            self._cross = session(cross, cross_threads or threads)
            self._step = session(step, threads)
            self._wide = self._step if (cross_threads or threads) == threads else session(step, cross_threads)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"ONNX Runtime cannot load the decoder graphs: {exc}", where=str(model_dir),
                             hint="check the onnxruntime installation") from None
        self._outputs = [o.name for o in self._step.get_outputs()]
        self.compute_type = precision

    def widened(self) -> _Widened:
        """This decoder with every window's calls on its wide session (for pricing them)."""
        return _Widened(self)

    # --- the fork's step API -------------------------------------------------------------------
    def prefill(self, encoder_output, prompt: Sequence[int], wide: Callable[[], bool] | None = None):
        return self.prefill_rows(encoder_output, prompt, [len(prompt) - 1], wide)

    def prefill_rows(self, encoder_output, prompt: Sequence[int], rows: Sequence[int],
                     wide: Callable[[], bool] | None = None):
        """``prefill`` returning the logits of the prompt's ``rows`` (the fork's gives the last
        row's only): the row after SOT gives ``<|nospeech|>`` without a second call. ``wide``: see
        ``InvariantDecoderState`` (the prefill always runs on ``cross_threads``)."""
        enc = np.asarray(encoder_output, dtype=np.float32)
        enc = np.ascontiguousarray(enc.reshape(-1, enc.shape[-1]))
        names = [o.name for o in self._cross.get_outputs()]
        cross = dict(zip(names, self._cross.run(names, {"encoder_output": enc})))
        state = InvariantDecoderState(self.shape, self.shape.max_positions, cross, wide)
        return state, self._call(state, list(prompt), rows, self._wide)

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
        start, rows = state.current_step, len(tokens)
        if start + rows > state.length:
            raise ValueError(f"decoder positions exhausted ({start} + {rows} > {state.length})")
        positions = np.arange(start, start + rows, dtype=np.int64)
        feeds = state.feeds
        feeds["tokens"] = np.asarray(tokens, np.int64)
        feeds["positions"] = positions
        feeds["logit_rows"] = np.arange(rows, dtype=np.int64) if logit_rows is None else \
            np.asarray(logit_rows, np.int64)
        feeds["mask"] = np.where(np.arange(state.length)[None, :] <= positions[:, None], 0.0,
                                 -np.inf).astype(np.float32)
        session = session or (self._wide if state.wide() else self._step)
        logits, *new = session.run(self._outputs, feeds)
        for i in range(state.layers):
            feeds[f"past_k_{i}"][:, start:start + rows] = new[2 * i]
            feeds[f"past_v_{i}"][:, :, start:start + rows] = new[2 * i + 1]
        state.current_step = start + rows
        return logits


class _Widened:
    """An ``InvariantDecoder`` whose windows run wide: the same step API, prefill with ``wide`` set."""

    def __init__(self, decoder: InvariantDecoder) -> None:
        self._decoder = decoder

    def prefill(self, encoder_output, prompt: Sequence[int]):
        return self._decoder.prefill(encoder_output, prompt, wide=lambda: True)

    def __getattr__(self, name: str):
        return getattr(self._decoder, name)
