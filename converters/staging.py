"""Output directories that appear whole or not at all: build in a hidden sibling, then rename.

A failed or interrupted conversion leaves at most a hidden ``.NAME.tmp-*`` folder that the next run
does not mistake for a model (and that this module removes on any exception it sees).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specwhisper.errors import ModelError


def check_destination(out_dir: Path, overwrite: bool, source: str | Path | None = None) -> None:
    """Refuse to replace a non-empty directory (or any file) unless asked to; and, even when asked
    to, a destination that is ``source`` or holds it (see ``check_not_source``)."""
    if source is not None:
        check_not_source(out_dir, source)
    if out_dir.is_file() or out_dir.is_symlink():
        raise ModelError("output path exists and is not a directory", where=str(out_dir),
                         hint="choose another output directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ModelError("output directory already exists and is not empty", where=str(out_dir),
                         hint="choose another directory, or pass --force (overwrite=True) to replace it")


def check_not_source(out_dir: str | Path, source: str | Path) -> None:
    """Refuse an output directory that is the source (a folder, or a checkpoint file) or one of the
    folders holding it, symlinks resolved: the finished output replaces the whole destination
    folder, so with --force that would delete the checkpoint being converted."""
    src = Path(source).expanduser().resolve()
    dst = Path(out_dir).expanduser().resolve()
    if dst == src or dst in src.parents:
        what = "is the source" if dst == src else "contains the source"
        raise ModelError(f"the output directory {what}; writing it would replace (delete) the source",
                         where=f"{dst} (source: {src})",
                         hint="write the converted model to another directory, e.g. a sibling folder")


@contextmanager
def staged_dir(out_dir: str | Path, overwrite: bool = False, source: str | Path | None = None) -> Iterator[Path]:
    """Yield a temporary directory next to ``out_dir``; on success it becomes ``out_dir`` atomically.

    ``source``: the checkpoint being converted, which ``out_dir`` must neither be nor hold."""
    out_dir = Path(out_dir).expanduser().absolute()
    check_destination(out_dir, overwrite, source)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        raise ModelError(f"cannot create the output directory: {exc.strerror or exc}", where=str(out_dir),
                         hint="check the path and its permissions") from None
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700 folders
        _swap_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_into_place(tmp: Path, out_dir: Path) -> None:
    if out_dir.is_dir():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "x")
        try:
            os.replace(tmp, out_dir)
        except OSError:
            os.replace(old / "x", out_dir)  # put the previous model back
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


def write_json(path: Path, data: object) -> None:
    """Write JSON through a temporary file and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
