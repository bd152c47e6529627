"""Temperature fallback: decode a window again, sampling, when its greedy text is a repetition loop.

Greedy decoding sometimes locks into a loop ("6-6-6-6-..." for 200 tokens); Whisper's own
transcribe and faster-whisper then retry the window at rising temperatures. The test is the text's
gzip compression ratio: looping text compresses far better than speech. Each attempt is exact under
speculation (greedy, or seeded sampling), and the decision reads only the attempt's text, so the
window's final tokens are too.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from .errors import SpecWhisperError
from .sampling import MAX_TEMPERATURE

COMPRESSION_RATIO_THRESHOLD = 2.4  # Whisper's and faster-whisper's default
LADDER = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default temperatures


def compression_ratio(text: str) -> float:
    """UTF-8 bytes over zlib-compressed bytes (1.0 or so for short text, above 2.4 for loops)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def parse_temperatures(value) -> float | tuple[float, ...]:
    """One temperature, or a fallback ladder: a sequence, or text such as ``"0,0.2,0.4"``."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()] if "," in value else value
    if isinstance(value, (list, tuple)):
        if not value:
            raise SpecWhisperError("empty temperature list", where="--temperature", hint="use e.g. 0 or 0,0.2,0.4")
        return tuple(_one(v) for v in value)
    return _one(value)


def ladder(temperature: float | Sequence[float]) -> tuple[float, ...]:
    return tuple(temperature) if isinstance(temperature, tuple) else (float(temperature),)


def _one(value) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = float("nan")
    if not (0.0 <= t <= MAX_TEMPERATURE):  # NaN fails too
        raise SpecWhisperError(f"temperature {value!r} is not a number from 0 to {MAX_TEMPERATURE:g}",
                               where="--temperature",
                               hint=f"use 0 (greedy) up to {MAX_TEMPERATURE:g}, or a fallback list such as "
                                    f"{','.join(f'{x:g}' for x in LADDER)}")
    return t
