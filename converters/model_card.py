"""``model_card.json``: where a converted model came from, so a result can be traced to its inputs.

It records the source (kind and path or hub id), the sha256 of every input file read, the
quantization, the converter and library versions, and the sha256 of the files written.
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Iterable
from pathlib import Path

from specwhisper.io_utils import sha256_file

from .staging import write_json

CARD_NAME = "model_card.json"
CONVERTER_VERSION = 1  # bump when the output of a conversion changes for the same inputs
CARD_FORMAT = "specwhisper-model-card/1"


def file_entries(paths: Iterable[Path], root: Path | None = None) -> list[dict]:
    """[{name, bytes, sha256}] for files, named relative to ``root`` when given."""
    out = []
    for p in sorted(set(paths)):
        name = str(p.relative_to(root)) if root is not None else str(p)
        out.append({"name": name, "bytes": p.stat().st_size, "sha256": sha256_file(p)})
    return out


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def library_versions(*dists: str) -> dict[str, str | None]:
    names = ("specwhisper", "ctranslate2", "ctranslate2-crisperwhisper", "numpy", *dists)
    return {d: v for d in names if (v := _version(d)) is not None}


def write_model_card(out_dir: Path, *, source: dict, inputs: list[dict], quantization: str,
                     extra: dict | None = None, libraries: tuple[str, ...] = ()) -> Path:
    """Write ``model_card.json`` describing ``out_dir`` (call after every other file is in place)."""
    outputs = [p for p in out_dir.iterdir() if p.is_file() and p.name != CARD_NAME and not p.name.startswith(".")]
    card = {
        "format": CARD_FORMAT,
        "converter": {"name": "specwhisper.converters", "version": CONVERTER_VERSION,
                      "libraries": library_versions(*libraries)},
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": source,
        "inputs": inputs,
        "quantization": quantization,
        "outputs": file_entries(outputs, root=out_dir),
    }
    if extra:
        card.update(extra)
    path = out_dir / CARD_NAME
    write_json(path, card)
    return path


def record_extra_output(out_dir: Path, path: Path, key: str, info: dict) -> None:
    """Add a file written after the card (a vocabulary map) to ``model_card.json``, atomically."""
    import json

    card_path = out_dir / CARD_NAME
    if not card_path.is_file():
        return
    card = json.loads(card_path.read_text(encoding="utf-8"))
    outputs = [o for o in card.get("outputs", []) if o.get("name") != path.name]
    card["outputs"] = sorted(outputs + file_entries([path], root=out_dir), key=lambda o: o["name"])
    card.setdefault(key, {})[path.name] = info
    write_json(card_path, card)
