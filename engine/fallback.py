"""Temperature fallback: decode a window again, sampling, when its greedy text looks wrong.

Greedy decoding sometimes locks into a loop ("6-6-6-6-..." for 200 tokens); Whisper's own
transcribe and faster-whisper then retry the window at rising temperatures. The tests are
faster-whisper's: the text's gzip compression ratio (looping text compresses far better than
speech) and, where asked, the mean log-probability of the tokens; a window whose
``<|nospeech|>`` probability is high and whose tokens are improbable is silence, not a failure.
Each attempt is exact under speculation (greedy, or seeded sampling), and the decision reads only
an attempt's tokens and scores computed from them alone, so the window's final tokens are too.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import OptionError, option_where
from .sampling import MAX_TEMPERATURE

COMPRESSION_RATIO_THRESHOLD = 2.4  # Whisper's and faster-whisper's default
LADDER = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default temperatures


def compression_ratio(text: str) -> float:
    """UTF-8 bytes over zlib-compressed bytes (1.0 or so for short text, above 2.4 for loops)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def parse_temperatures(value) -> float | tuple[float, ...]:
    """One temperature, or a fallback ladder: a sequence, or text such as ``"0,0.2,0.4"``."""
    if hasattr(value, "tolist") and not isinstance(value, str):  # a numpy array or scalar
        value = value.tolist()
    if isinstance(value, str) and "," in value:
        if any(not v.strip() for v in value.split(",")):
            raise OptionError(f"temperature list {value!r} has an empty entry", where=option_where("temperature"),
                              hint="separate the temperatures by single commas, e.g. 0,0.2,0.4")
        value = value.split(",")
    if isinstance(value, (list, tuple)):
        if not value:
            raise OptionError("empty temperature list", where=option_where("temperature"), hint="use e.g. 0 or 0,0.2,0.4")
        return tuple(_one(v) for v in value)
    return _one(value)


def ladder(temperature: float | Sequence[float]) -> tuple[float, ...]:
    return tuple(temperature) if isinstance(temperature, tuple) else (float(temperature),)


def _one(value) -> float:
    try:
        if isinstance(value, bool):  # True is not 1.0 degrees of randomness
            raise TypeError
        t = float(value)
    except (TypeError, ValueError):
        t = float("nan")
    if not (0.0 <= t <= MAX_TEMPERATURE):  # NaN fails too
        raise OptionError(f"temperature {value!r} is not a number from 0 to {MAX_TEMPERATURE:g}",
                          where=option_where("temperature"),
                          hint=f"use 0 (greedy) up to {MAX_TEMPERATURE:g}, or a fallback list such as "
                               f"{','.join(f'{x:g}' for x in LADDER)}")
    return t


@dataclass(frozen=True)
class Attempt:
    """One decoding of a window at one temperature, with faster-whisper's three measures of it
    (``avg_logprob`` and ``no_speech_prob`` are None where nobody asked for scores)."""

    tokens: list[int]
    temperature: float
    compression_ratio: float
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    numerics: str = ""


@dataclass(frozen=True)
class Thresholds:
    """When an attempt fails (faster-whisper's defaults: 2.4, -1.0 and 0.6; None: no such test)."""

    compression_ratio: float | None = COMPRESSION_RATIO_THRESHOLD
    log_prob: float | None = None
    no_speech: float | None = None

    @property
    def need_scores(self) -> bool:
        return self.log_prob is not None or self.no_speech is not None

    def failed(self, attempt: Attempt) -> bool:
        """Too repetitive or too improbable, unless improbable because it is silence."""
        looping = self.compression_ratio is not None and attempt.compression_ratio > self.compression_ratio
        return looping or (self.improbable(attempt) and not self.silence(attempt))

    def improbable(self, attempt: Attempt) -> bool:
        return self.log_prob is not None and attempt.avg_logprob is not None and attempt.avg_logprob < self.log_prob

    def silence(self, attempt: Attempt) -> bool:
        """Likely no speech and not confidently decoded: faster-whisper skips such a window."""
        return (self.no_speech is not None and attempt.no_speech_prob is not None
                and attempt.no_speech_prob > self.no_speech and self.improbable(attempt))

    def skip(self, attempt: Attempt) -> bool:
        """The window is skipped as silence (faster-whisper's test after the fallback: there a
        confident decoding is kept whatever its ``<|nospeech|>`` probability)."""
        if self.no_speech is None or attempt.no_speech_prob is None or attempt.no_speech_prob <= self.no_speech:
            return False
        return not (self.log_prob is not None and attempt.avg_logprob is not None
                    and attempt.avg_logprob > self.log_prob)

    def best(self, attempts: Sequence[Attempt]) -> Attempt:
        """All failed: the most probable of those that do not loop (or of all), at the last
        attempt's temperature (what decides whether the next window's prompt is reset). Without
        scores, the last of them."""
        pool = [a for a in attempts if self.compression_ratio is None or a.compression_ratio <= self.compression_ratio]
        pool = pool or list(attempts)
        scored = all(a.avg_logprob is not None for a in pool)
        chosen = max(pool, key=lambda a: a.avg_logprob) if scored else pool[-1]
        return Attempt(chosen.tokens, attempts[-1].temperature, chosen.compression_ratio, chosen.avg_logprob,
                       chosen.no_speech_prob, chosen.numerics)
