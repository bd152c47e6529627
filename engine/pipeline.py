"""Encode the next window while this one is decoded: the encoder and decoder are separate instances.

On CPU the decoder runs on its own 1-thread instance (see ``LoadedModel``), so while it decodes
window i a second core idles. Encoding window i + 1 on the encoder instance in that time hides part
of the encoder, which dominates on CPU. Nothing numeric changes: each instance keeps its thread
count, and the kernels (CTranslate2's or ONNX Runtime's encoder) give the same bits whether or not
the other instance is busy
(``tests/test_pipeline.py``). Multi-window audio only; a single window has nothing to overlap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

Encode = Callable[[np.ndarray], object]


class EncoderAhead:
    """Hands out encoder outputs in window order, computing the next one in the background."""

    def __init__(self, encode: Encode, segment: Callable[[int], np.ndarray | None], n_windows: int,
                 enabled: bool) -> None:
        """``segment(i)``: window i's features, or None for a window that is not decoded (silence)."""
        self._encode = encode
        self._segment = segment
        self._n = n_windows
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="encoder-ahead") if enabled and n_windows > 1 else None
        self._jobs: dict[int, Future] = {}

    def get(self, index: int) -> tuple[object, float, float]:
        """(encoder output, seconds the encoder took, seconds waited for it) for window ``index``."""
        t0 = time.perf_counter()
        job = self._jobs.pop(index, None)
        output, took = job.result() if job is not None else self._timed(self._segment(index))
        return output, took, time.perf_counter() - t0

    def start_after(self, index: int) -> None:
        """Queue the encoder of the next window after ``index`` that is decoded. Called once the
        encoder instance is no longer needed for window ``index`` (language detection runs on it)."""
        if self._pool is None:
            return
        for nxt in range(index + 1, self._n):
            features = self._segment(nxt)
            if features is not None:
                if nxt not in self._jobs:
                    self._jobs[nxt] = self._pool.submit(self._timed, features)
                return

    def busy(self) -> bool:
        """Whether an encoder runs ahead now (the decoder then leaves it the other cores)."""
        return any(not job.done() for job in self._jobs.values())

    def _timed(self, features: np.ndarray) -> tuple[object, float]:
        t0 = time.perf_counter()
        output = self._encode(features)
        return output, time.perf_counter() - t0

    def close(self) -> None:
        """Wait for (and drop) encoder work no window will ask for (an error stopped the loop)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._jobs.clear()

    def __enter__(self) -> EncoderAhead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
