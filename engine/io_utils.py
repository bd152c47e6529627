"""Files appear whole or not at all: write to a temporary file beside the target, then rename.

A failed write (a full or read-only disk) leaves neither the file nor the temporary one and raises
the ``OSError`` (callers that may carry on without the file, such as caches, catch it);
``write_failure`` turns it into the user-facing error for outputs the user asked for.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import OutputError, SpecWhisperError

# what to do about a failed write, by errno (the rest: the generic hint of ``write_failure``)
_HINTS = {
    errno.ENOSPC: "free space on that disk, or write to another one{option}",
    errno.EDQUOT: "free space within your disk quota, or write elsewhere{option}",
    errno.EROFS: "that file system is mounted read-only: write to another one{option}",
    errno.EACCES: "make the folder writable (chmod u+w), or write elsewhere{option}",
    errno.EPERM: "make the folder writable (chmod u+w), or write elsewhere{option}",
    errno.ENOTDIR: "remove that file or write elsewhere{option}",
    errno.EEXIST: "remove that file or write elsewhere{option}",
    errno.EISDIR: "a folder stands where the file should be: remove it, or write elsewhere{option}",
}
WRITE_ERRNOS = frozenset(_HINTS)  # a write's own failures (an HTTP error is an OSError too, without one)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary name adds 14 characters: a name near the file system's 255 would fail there only
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs should look like any other file
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_failure(exc: OSError, path: str | os.PathLike[str], what: str = "the output file",
                  option: str | None = None, error: type[SpecWhisperError] = OutputError) -> SpecWhisperError:
    """The clear error for a failed write of ``path`` (``what``: the file in words; ``option``:
    the command-line option that chooses where it goes, named in the hint)."""
    reason = (exc.strerror or str(exc)).lower()
    where = path
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):  # mkdir met a file on the way to the folder
        reason, where = "a file stands where a folder should be", _file_in_the_way(Path(exc.filename or path))
    also = f" (--{option.lstrip('-')})" if option else ""
    hint = _HINTS.get(exc.errno, "check that the folder exists and is writable, or write elsewhere{option}")
    return error(f"cannot write {what}: {reason} (nothing was written)", where=str(where),
                 hint=hint.format(option=also))


def _file_in_the_way(path: Path) -> Path:
    """The file that stands where ``path`` or one of its folders should be (``path`` if none)."""
    for candidate in (path, *path.parents):
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return path


def check_writable(path: str | os.PathLike[str], what: str, option: str | None = None) -> None:
    """Raise ``write_failure``'s error now where ``path`` could not be written later: before a run
    whose result it is to hold (a read-only folder found after an hour of learning loses the hour).
    Probes with a temporary file beside it (creating its folder, as the write would)."""
    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        probe_folder(path.parent)
    except OSError as exc:
        raise write_failure(exc, path, what, option) from None


def check_writable_folder(folder: str | os.PathLike[str], what: str = "to the output folder",
                          option: str | None = "output-dir") -> None:
    """``check_writable`` for a folder outputs go into: made and written to once now, so that a
    file in its way or a read-only disk is one clear error before any work."""
    try:
        probe_folder(folder)
    except OSError as exc:
        raise write_failure(exc, folder, what, option) from None


def probe_folder(folder: str | os.PathLike[str]) -> None:
    """Make ``folder`` (as a write would) and write a temporary file in it, raising the
    ``OSError`` a later write there would meet (read-only, full, a file in the way)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def exclusive_lock(lock_file: str | os.PathLike[str], *, wait: bool = True) -> Iterator[IO[str] | None]:
    """Hold an exclusive lock on ``lock_file`` among processes; yields the open lock file, or None
    where no lock can be taken (no ``fcntl`` on this system, a read-only folder, a file system
    without locks: the work goes on unguarded, as it would without this lock). The lock file is
    made if absent and never removed (removing one races with the next taker). A file that atomic
    writes replace cannot be its own lock: the next writer opens the new file. ``wait=False``:
    ``BlockingIOError`` at once where another process holds it."""
    try:
        import fcntl
    except ImportError:
        yield None
        return
    lock_file = Path(lock_file)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_file, "a+", encoding="utf-8")  # noqa: SIM115 - held for the with block
    except OSError:
        handle = None
    locked = False
    if handle is not None:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            locked = True
        except BlockingIOError:
            handle.close()
            raise
        except OSError:  # ENOLCK, EOPNOTSUPP: this file system cannot lock
            pass
    try:
        yield handle if locked else None
    finally:
        if handle is not None:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def file_stamp(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """What changes when a file is written again (an atomic write makes a new inode): None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
