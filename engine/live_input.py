"""Audio chunks into a live stream: checked, converted to float32 and cut into steps (``live``).

A microphone callback, a socket or a file reader hands chunks of any size and of a few
encodings. The stream must see the same samples at the same points of its clock whatever the
chunking (the same audio gives the same events), and a refused chunk must leave it as it was.
So chunks are checked whole before anything is kept, an odd byte of int16 PCM waits for the
next chunk, and samples are released one step at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from .audio import SAMPLE_RATE, check_float_range
from .errors import AudioError, OptionError


class ChunkQueue:
    """Fed samples not yet handed to a pass, and the count of samples fed."""

    def __init__(self) -> None:
        self._pending: list[np.ndarray] = []
        self.pending = 0  # samples waiting (less than a step between passes)
        self.fed = 0  # samples fed since the start
        self._leftover = b""  # an odd byte of int16 PCM, completed by the next chunk

    def add(self, chunk, where: str) -> None:
        """Queue a chunk (mono numpy of floats in [-1, 1], float64 converted to float32, or of int16;
        int16 little-endian PCM bytes); raises ``AudioError`` for anything else, keeping nothing of it."""
        samples = self._samples(chunk, where)
        if samples.size:
            self._pending.append(samples)
            self.pending += samples.size
            self.fed += samples.size

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` queued samples (``n`` <= ``pending``)."""
        if n <= 0:
            return np.zeros(0, np.float32)
        queued = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = [queued[n:]] if queued.size > n else []
        self.pending -= n
        return queued[:n]

    def _samples(self, chunk, where: str) -> np.ndarray:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            data = self._leftover + bytes(chunk)
            whole = len(data) // 2 * 2
            self._leftover = data[whole:]
            return np.frombuffer(data[:whole], dtype="<i2").astype(np.float32) / 32768.0
        if not isinstance(chunk, np.ndarray):
            raise AudioError(f"audio chunk of type {type(chunk).__name__}", where=where,
                             hint="pass a float32 numpy array of 16 kHz mono samples, or int16 PCM bytes")
        if chunk.ndim == 2 and chunk.shape[1] == 1:
            chunk = chunk[:, 0]
        if chunk.ndim != 1:
            raise AudioError(f"audio chunk has shape {chunk.shape}: a live stream takes mono samples", where=where,
                             hint="mix the channels down first: chunk.mean(axis=1) for (samples, channels), "
                                  "chunk.mean(axis=0) for (channels, samples)")
        if chunk.dtype == np.int16:
            return chunk.astype(np.float32) / 32768.0
        if chunk.dtype.kind != "f":
            raise AudioError(f"audio chunk has dtype {chunk.dtype}: a live stream takes float samples in [-1, 1] "
                             "or int16 PCM", where=where,
                             hint="convert with chunk.astype(np.float32) / 32768 for 16-bit integers, "
                                  "/ 2**31 for 32-bit ones")
        if not np.isfinite(chunk).all():
            raise AudioError("audio chunk contains NaN or infinite samples", where=where,
                             hint="check the producer of the audio; the chunk was not added to the stream")
        check_float_range(chunk, where)
        # float64 is what soundfile.read and most DSP code hand over: converted, not refused
        return chunk.astype(np.float32)  # a copy, also of float32: the caller may reuse its buffer


class ChunkConsumer:
    """What a live stream and a command listener share: ``feed(chunk)`` and ``finish()`` of their
    own, audio queued in ``self._input`` (a ``ChunkQueue``)."""

    _input: ChunkQueue
    _finished: bool
    # Results made but not yet returned: a call interrupted (Ctrl-C, a notebook's stop button) after
    # some of its passes or decodings returns them from the next ``feed`` or ``finish``.
    _undelivered: list

    @property
    def finished(self) -> bool:
        """Whether ``finish()`` was called (it may still be running, where it was interrupted:
        calling it again completes it)."""
        return self._finished

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("feed", "finish"):
            if name in cls.__dict__:
                setattr(cls, name, _one_caller_at_a_time(cls.__dict__[name]))

    def _deliver(self) -> list:
        """The results made since the last call returned, handed over once."""
        results, self._undelivered = self._undelivered, []
        return results

    def feed(self, chunk) -> list:
        raise NotImplementedError

    def finish(self) -> list:
        raise NotImplementedError

    def events(self, chunks: Iterable) -> Iterator:
        """Feed every chunk, then finish, yielding results as they come."""
        for chunk in chunks:
            yield from self.feed(chunk)
        yield from self.finish()

    @property
    def time_s(self) -> float:
        """Seconds of audio fed."""
        return self._input.fed / SAMPLE_RATE


def check_consumer_args(what: str, call: str, sample_rate: int, options: dict, reserved: tuple[str, ...],
                        why: str) -> None:
    """A clear error for audio not at 16 kHz, or an option that the consumer (``what``, made by
    ``call``) sets itself (``reserved``; ``why`` says why)."""
    if sample_rate != SAMPLE_RATE:
        raise AudioError(f"{what} takes 16 kHz audio, got sample_rate={sample_rate!r}",
                         where=f"{call}(sample_rate=...)",
                         hint="resample the source to 16000 Hz (e.g. soxr.ResampleStream) before feeding")
    for name in reserved:
        if name in options:
            raise OptionError(f"{name} is not an option of {what}", where=name, hint=why)


def _one_caller_at_a_time(method):
    """``feed``/``finish`` refused while another thread is inside one of them on the same object:
    a voice server feeding one listener from two pool threads (or from a task that
    ``asyncio.wait_for`` gave up on, whose thread goes on) got IndexError from a deque, or another
    command's text, since the chunks interleaved in no set order."""
    import functools
    import threading

    from .errors import SpecWhisperError

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        busy = self.__dict__.setdefault("_calling", threading.Lock())
        if not busy.acquire(blocking=False):
            kind = type(self).__name__
            raise SpecWhisperError(f"{kind}.{method.__name__}() called while another thread is in feed() or "
                                   f"finish() of the same {kind}", where=f"{kind}.{method.__name__}",
                                   hint="feed one stream or listener from one thread at a time, each call "
                                        "finished before the next (in asyncio: await each run_in_executor "
                                        "call of a connection before its next chunk)")
        try:
            return method(self, *args, **kwargs)
        finally:
            busy.release()

    return guarded
