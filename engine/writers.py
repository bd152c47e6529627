"""Output files (txt, json, srt, vtt), each written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from .io_utils import atomic_write_text
from .transcriber import Result

FORMATS = ("txt", "json", "srt", "vtt")


def _timestamp(seconds: float, sep: str) -> str:
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def render(result: Result, fmt: str, extra: dict | None = None) -> str:
    if fmt == "txt":
        return result.text + "\n"
    if fmt == "json":
        data = result.to_dict()
        if extra:
            data.update(extra)
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    cues = [s for s in result.segments if s.text.strip()]  # timestamped segments, or whole windows
    if fmt == "srt":
        return "".join(f"{i}\n{_timestamp(c.start_s, ',')} --> {_timestamp(c.end_s, ',')}\n{c.text.strip()}\n\n"
                       for i, c in enumerate(cues, 1))
    if fmt == "vtt":
        return "WEBVTT\n\n" + "".join(f"{_timestamp(c.start_s, '.')} --> {_timestamp(c.end_s, '.')}\n{c.text.strip()}\n\n"
                                      for c in cues)
    raise ValueError(f"unknown format {fmt}")


def write_result(result: Result, audio_path: str | Path, output_dir: str | Path, fmt: str,
                 extra: dict | None = None) -> Path:
    """Write ``<output_dir>/<stem>.<fmt>``; the file appears whole or not at all."""
    target = Path(output_dir) / f"{Path(audio_path).stem}.{fmt}"
    return atomic_write_text(target, render(result, fmt, extra))
