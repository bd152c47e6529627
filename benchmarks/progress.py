"""A progress bar on stderr (redrawn in place on a terminal, a line now and then otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Counts finished units of work and shows done/total, elapsed and an estimate of what is left."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24) -> None:
        self.total = max(int(total), 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.start = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_line = -1.0

    def render(self, label: str = "") -> str:
        frac = min(self.done / self.total, 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {100 * frac:3.0f}% "
                f"{_clock(elapsed)}<{_clock(eta)} {label}")

    def advance(self, n: int = 1, label: str = "") -> None:
        self.done += n
        self.show(label)

    def show(self, label: str = "") -> None:
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[K" + self.render(label)[:200])
            self.stream.flush()
        elif now - self._last_line >= 10 or self.done >= self.total:
            self._last_line = now
            self.stream.write(self.render(label) + "\n")
            self.stream.flush()

    def note(self, message: str) -> None:
        """A message on its own line (a failed clip, a skipped system) without breaking the bar."""
        self.stream.write(("\r\x1b[K" if self.tty else "") + message + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
