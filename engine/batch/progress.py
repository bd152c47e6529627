"""Progress of a batch as a user watching a long job wants it: files and hours of audio done,
throughput (audio hours an hour), an ETA, and a line for each failure with its error."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from .worker import Outcome


@dataclass
class BatchProgress:
    """Counts outcomes as they arrive. ``total_audio_s``: the inputs' audio where headers told it
    (None where some did not: the ETA is then taken from files instead of audio)."""

    total_files: int
    total_audio_s: float | None
    stream: TextIO | None = field(default_factory=lambda: sys.stderr)
    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    skipped: int = 0
    failed: int = 0
    audio_s: float = 0.0  # transcribed in this run (skipped inputs not counted)
    skipped_audio_s: float = 0.0

    def update(self, outcome: Outcome, final: bool = True) -> None:
        """Count ``outcome``; a failure that will be retried (``final`` False) is only reported."""
        if outcome.status == "done":
            self.done += 1
            self.audio_s += outcome.audio_s
        elif outcome.status == "skipped":
            self.skipped += 1
            self.skipped_audio_s += outcome.audio_s
        elif final:
            self.failed += 1
        self._print(outcome, final)

    @property
    def finished(self) -> int:
        return self.done + self.skipped + self.failed

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def speed(self) -> float:
        """Audio seconds transcribed per wall second (= audio hours per hour)."""
        return self.audio_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def eta_s(self) -> float | None:
        worked = self.done + self.failed
        if worked == 0:
            return None
        left_files = self.total_files - self.finished
        if self.total_audio_s is not None and self.speed > 0:
            left_audio = max(self.total_audio_s - self.audio_s - self.skipped_audio_s, 0.0)
            return left_audio / self.speed
        return left_files * self.elapsed_s / worked

    def summary(self) -> str:
        return (f"{self.done} transcribed, {self.skipped} skipped (outputs there and verified), {self.failed} "
                f"failed; {self.audio_s / 3600:.2f} h of audio in {_clock(self.elapsed_s)} "
                f"({self.speed:.1f} audio hours an hour)")

    def _print(self, outcome: Outcome, final: bool) -> None:
        if self.stream is None:
            return
        head = f"[{self.finished}/{self.total_files}]"
        if outcome.status == "failed":
            again = "" if final else " (will retry)"
            print(f"{head} FAILED{again} {outcome.path}: {outcome.error}", file=self.stream, flush=True)
            return
        total = "" if self.total_audio_s is None else f"/{self.total_audio_s / 3600:.2f}"
        eta = self.eta_s()
        speed = f", {self.speed:.1f}x real time" if self.audio_s > 0 else ""  # nothing transcribed yet: no rate
        rest = (f" | {(self.audio_s + self.skipped_audio_s) / 3600:.2f}{total} h audio{speed}"
                + ("" if eta is None else f", ETA {_clock(eta)}"))
        what = "skipped" if outcome.status == "skipped" else f"{outcome.wall_s:.1f} s"
        print(f"{head} {outcome.name} ({what}){rest}", file=self.stream, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
