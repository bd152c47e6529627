"""Refuse a truncated or damaged weights file before a conversion reads it, naming the file.

Why: an interrupted download leaves a file cut short. Read inside transformers or torch, it
fails deep in their code with their own exception types (safetensors' ``SafetensorError``
derives from ``Exception`` only) and messages that name neither the file nor the cure. Both
checks read only the file's index (the safetensors header, the zip's central directory at its
end), so a large checkpoint costs milliseconds.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from specwhisper.errors import ModelError

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since PyTorch 1.6


def check_weights_file(path: Path) -> None:
    """Raise ModelError when ``path`` (a .safetensors file or a torch checkpoint) is cut short or
    unreadable; files of other formats (an index .json, a legacy pickle) are left to their reader."""
    if path.suffix == ".safetensors":
        reason = _safetensors_problem(path)
    else:
        reason = _torch_zip_problem(path)
    if reason is not None:
        raise ModelError(f"the weights file is truncated or damaged ({reason})", where=str(path),
                         hint="download the file again (an interrupted download leaves it cut short), "
                              "or convert an intact copy of the checkpoint")


def _safetensors_problem(path: Path) -> str | None:
    """safetensors' own header check: it refuses a header cut short or data that does not cover
    the tensors the header lists (what a partial download looks like)."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as fh:
            fh.keys()
    except ImportError:
        return None  # transformers needs safetensors; without it the conversion fails on its own terms
    except Exception as exc:  # SafetensorError derives from Exception only; OSError for unreadable files
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def _torch_zip_problem(path: Path) -> str | None:
    """A torch checkpoint is a zip archive whose directory is at the end: a file that starts as
    one but has no readable directory was cut short."""
    try:
        with path.open("rb") as fh:
            if fh.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:
                return None
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None
