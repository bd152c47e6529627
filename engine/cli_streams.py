"""The command line's standard streams as a script sees them: stderr carries notes and progress,
stdout the product.

A closed or full stderr (``2>&1 | head -1``, ``2>/dev/full``) raised at the next progress line and
ended a batch after one or two of its files, with exit 0: diagnostics that cannot be written are
dropped and the work goes on. A stdout that cannot take the product (``> /dev/full``, ``>&-``)
printed a traceback or lost the text with exit 0: it is one error, exit 1. A stdout closed by its
reader (``| head``) ends the run quietly with exit 0, as before.
"""

from __future__ import annotations

import errno
import os
import sys


class StdoutFailed(Exception):
    """stdout (``stream``) could not take what was written (``error``: the OSError)."""

    def __init__(self, error: OSError, stream=None):
        super().__init__(str(error))
        self.error, self.stream = error, stream

    @property
    def reader_left(self) -> bool:
        """The reader closed the pipe (``| head``): not a failure of the run."""
        return isinstance(self.error, BrokenPipeError) or self.error.errno == errno.EPIPE

    def message(self) -> str:
        return (f"cannot write to standard output: {self.error.strerror or self.error}\n  what to do: send the "
                "output to a file or a pipe that takes it, or write files with --output-dir")


class _Wrapped:
    """A standard stream (None where its descriptor is closed) whose other attributes are its own."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name: str):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


class _Diagnostics(_Wrapped):
    """stderr that drops what it cannot write (and everything after) instead of raising; a closed
    one (``2>&-``: None in Python, where every command failed on ``sys.stderr.isatty()``, and
    ``print(file=None)`` would have written diagnostics into stdout) is lost from the start."""

    def __init__(self, stream):
        super().__init__(stream)
        self._lost = stream is None

    def isatty(self) -> bool:
        return not self._lost and self._stream.isatty()

    def write(self, text: str) -> int:
        if not self._lost:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):
                self._lost = True
        return len(text)

    def flush(self) -> None:
        if not self._lost:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._lost = True


class _Product(_Wrapped):
    """stdout whose failures are ``StdoutFailed`` (a closed stdout, None in Python, fails at its
    first write instead of taking the text without a word)."""

    def write(self, text: str) -> int:
        if self._stream is None:
            raise StdoutFailed(OSError(errno.EBADF, "standard output is closed"))
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutFailed(exc, self._stream) from None

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except OSError as exc:
                raise StdoutFailed(exc, self._stream) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()


def guard_streams():
    """Put the guarded streams in place; returns what puts the originals back."""
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = _Product(stdout)  # type: ignore[assignment]
    sys.stderr = _Diagnostics(stderr)  # type: ignore[assignment]

    def restore() -> None:
        sys.stdout, sys.stderr = stdout, stderr

    return restore


def drop_stdout(stream) -> None:
    """Point descriptor 1 at /dev/null where ``stream``, the stdout that failed, writes to it: text
    still buffered there would fail again (and print "Exception ignored") when the interpreter
    flushes it at exit. A stream of the caller's own (an application calling ``main``, a test's
    capture) is left alone, and so is the process's real stdout then."""
    try:
        if stream is None or stream.fileno() != 1:
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor
        pass


STDIN = "-"  # an input read from standard input (``ffmpeg -i talk.mp4 -f wav - | specwhisper transcribe -``)
STDIN_NAME = "stdin"  # its outputs' name: stdin.json, stdin.srt


def output_name(path: str) -> str:
    """The name an input's output files take after (standard input's: ``stdin``)."""
    return STDIN_NAME if path == STDIN else path


def read_standard_input():
    """Standard input read whole (decoders seek), as a binary file object whose errors name it.
    A terminal or nothing piped in is said before the model loads."""
    import io

    from .audio import STDIN_WHERE
    from .errors import AudioError

    hint = "pipe audio in, e.g. ffmpeg -i talk.mp4 -f wav - | specwhisper transcribe -"
    if sys.stdin is None or sys.stdin.isatty():
        raise AudioError("standard input is a terminal, not audio", where="-", hint=hint)
    data = sys.stdin.buffer.read()
    if not data:
        raise AudioError("standard input is empty: nothing was piped in", where="-", hint=hint)
    buffer = io.BytesIO(data)
    buffer.name = STDIN_WHERE
    return buffer
