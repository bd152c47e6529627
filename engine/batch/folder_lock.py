"""One batch job at a time in an output folder.

Two jobs started into one folder (a cron job that overran, a second terminal) would decode the same
inputs twice, race on the recorded decisions (``decisions.job``) and could settle two numerics for
one folder. The driver holds an advisory lock on a file in the folder's ledger for the whole job;
a second job stops at once with who holds it. Workers (pool processes, Ray actors) take no lock:
they write only what their driver gave them. The lock goes with the process, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from ..errors import SpecWhisperError
from ..io_utils import exclusive_lock

LOCK_NAME = "job.lock"


@contextlib.contextmanager
def held_by_this_job(ledger_dir: str | Path) -> Iterator[None]:
    """Hold the folder's job lock for the ``with`` block; SpecWhisperError where another job holds
    it. Where no lock can be taken (a file system without locks), the job runs without it."""
    path = Path(ledger_dir) / LOCK_NAME
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(exclusive_lock(path, wait=False))
        except BlockingIOError:
            raise SpecWhisperError("another batch job is writing to this output folder", where=str(path.parent.parent),
                                   hint=f"wait for it to end ({_holder(path)}), or give another --output-dir") from None
        if handle is not None:
            _write(handle, f"pid {os.getpid()} on {socket.gethostname()}\n")
            stack.callback(_write, handle, "")  # before the lock goes: no stale holder named
        yield


def _holder(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip() or "another process"
    except OSError:
        return "another process"


def _write(handle, text: str) -> None:
    with contextlib.suppress(OSError):
        handle.seek(0)
        handle.truncate()
        handle.write(text)
        handle.flush()
