"""One batch job at a time in an output folder.

Two jobs started into one folder (a cron job that overran, a second terminal) would decode the same
inputs twice, race on the recorded decisions (``decisions.job``) and could settle two numerics for
one folder. The driver holds an advisory lock on a file in the folder's ledger for the whole job;
a second job stops at once with who holds it. Workers (pool processes, Ray actors) take no lock:
they write only what their driver gave them. The lock goes with the process, however it ends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from ..errors import SpecWhisperError

LOCK_NAME = "job.lock"


@contextlib.contextmanager
def held_by_this_job(ledger_dir: str | Path) -> Iterator[None]:
    """Hold the folder's job lock for the ``with`` block; SpecWhisperError where another job holds it.
    Where the file system cannot lock (some network mounts), the job runs without it."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no advisory locks to take
        yield
        return
    path = Path(ledger_dir) / LOCK_NAME
    try:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the with block
    except OSError:  # the folder was probed writable; a file that cannot open is not worth a failed job
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):  # ENOLCK and the like: cannot lock here
                yield
                return
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise SpecWhisperError("another batch job is writing to this output folder", where=str(path.parent.parent),
                                   hint=f"wait for it to end ({holder}), or give another --output-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                handle.seek(0)
                handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
