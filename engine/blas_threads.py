"""The threads numpy's BLAS runs the one matrix product the engine does in numpy on (the features'
mel-filterbank product): one where that keeps the product's bits, else the machine's cores, never
what the environment happens to say.

Why one: OpenBLAS (numpy's BLAS on Linux wheels) splits even this small product over every core,
and its worker threads then spin for about 0.1 s waiting for more work. That spin took a core from
the encoder, which starts right after the features (base, a 10 s window: 153 ms instead of 112
here). One thread gives the same bits with OpenBLAS's AVX-512 kernels (it splits a product by output
blocks, not along the sum; checked bitwise for 500-6000 frames) and the product takes 1-3 ms.

Why the cores elsewhere: OpenBLAS's AVX2 kernels round by the split. On an AVX2-only EPYC one
thread moved the features by an ulp from faster-whisper's (numpy's default: a thread per core),
which flipped near-ties in the text (tiny.en on jfk: "for you ask" for "for you, ask"); and the
environment's count (Ray starts its workers with ``OMP_NUM_THREADS=1``) made a Ray worker's text
differ from a local run's. So where one thread changes the bits (checked once per process,
``_one_thread_keeps_bits``) the product runs on a thread per core whatever the environment says
(their spin costs the encoder ~40 ms of a 1.7 s window there).

OpenBLAS 0.3.27+ has a per-thread setting (``openblas_set_num_threads_local``), so other threads
of the user's program keep their BLAS threads. Where it is missing (another BLAS, an older
OpenBLAS) nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_setters: list | None = None  # the local thread-count setters of the loaded BLAS libraries


def _local_setters() -> list:
    """``openblas_set_num_threads_local`` of every OpenBLAS mapped into this process (numpy's)."""
    global _setters
    with _lock:
        if _setters is None:
            import numpy  # noqa: F401  (numpy's BLAS must be loaded to be found)

            _setters = []
            try:
                with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                    paths = sorted({line.split()[-1] for line in maps if "openblas" in line and ".so" in line})
            except OSError:
                paths = []
            for path in paths:
                try:
                    setter = ctypes.CDLL(path).openblas_set_num_threads_local
                except (OSError, AttributeError):
                    continue
                setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
                _setters.append(setter)
        return _setters


_keeps_bits: bool | None = None


def _cores() -> int:
    """The threads numpy's OpenBLAS starts with where nothing limits it: a thread per core."""
    return os.cpu_count() or 1


def _one_thread_keeps_bits() -> bool:
    """Whether a mel-filterbank product (80 x 201 by 201 x 3001, float32, laid out as the features'
    are) has the same bits on this thread alone as on a thread per core; measured once (a few ms)."""
    global _keeps_bits
    if _keeps_bits is None:
        import numpy as np

        rng = np.random.default_rng(0)
        filters = rng.random((80, 201), dtype=np.float32)
        power = rng.random((3001, 201), dtype=np.float32).T
        with _blas_threads(_local_setters(), _cores()):
            spread = filters @ power
        with _blas_threads(_local_setters(), 1):
            alone = filters @ power
        _keeps_bits = bool(np.array_equal(alone, spread))
    return _keeps_bits


@contextmanager
def _blas_threads(setters: list, count: int) -> Iterator[None]:
    """This thread's BLAS calls inside the block on ``count`` threads (``setters``: see ``_local_setters``)."""
    previous = [setter(count) for setter in setters]
    try:
        yield
    finally:
        for setter, value in zip(setters, previous):
            setter(value)


@contextmanager
def features_blas_threads() -> Iterator[None]:
    """This thread's BLAS calls inside the block on one thread where that keeps their bits, else on
    a thread per core (see the module's docstring)."""
    setters = _local_setters()
    with _blas_threads(setters, 1 if not setters or _one_thread_keeps_bits() else _cores()):
        yield
