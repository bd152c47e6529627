"""Clip selection: a representative subset for CI, every clip behind the ``full`` marker."""

from __future__ import annotations

from pathlib import Path

from conftest import load_manifest

SETS = {
    "real": "real/manifest.jsonl",
    "read": "read/manifest.jsonl",
    "smarthome": "domain/smarthome/test.jsonl",
    "car": "domain/car/test.jsonl",
}


def clips(root: Path, name: str) -> list[dict]:
    return load_manifest(root / SETS[name])


def representative(root: Path) -> list[dict]:
    """Every sentence clip of real/, a few digits, a few short read clips, a few of each domain."""
    real = clips(root, "real")
    read = [c for c in clips(root, "read") if c.get("duration_s", 99) < 12]
    picked = [c for c in real if c.get("kind") == "sentence"]
    picked += [c for c in real if c.get("kind") != "sentence"][::25]
    picked += read[::12][:6]
    picked += clips(root, "smarthome")[::15] + clips(root, "car")[::15]
    return picked


def every_single_window_clip(root: Path) -> list[dict]:
    out = []
    for name in SETS:
        out += [c for c in clips(root, name) if c.get("duration_s", 0) < 29.9]
    return out
