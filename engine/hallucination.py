"""``hallucination_silence_threshold``: openai-whisper's rule, as faster-whisper 1.2 applies it.

With word timings on, a segment whose words look anomalous (improbable, very short or very long)
and that sits in silence (a gap longer than the threshold on both sides, or at a window's edge) is
taken for a hallucination over silence: the window keeps the segments before it, and the next
window starts at it (or past the audio's end where only silence follows); a window whose first
worded segment is anomalous and starts more than the threshold into the window is dropped whole
and decoded again from there. Everything here reads the window's tokens and their alignment, a
fixed function of the tokens, so drafts cannot move it: exact under speculation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import Segment

PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"  # not counted as words (faster-whisper's set)


def word_anomaly(probability: float, duration: float) -> float:
    """How unlike a spoken word a timed word is: improbable, shorter than 133 ms or over 2 s."""
    score = 1.0 if probability < 0.15 else 0.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_anomaly(segment: Segment | None) -> bool:
    """A segment whose first eight words (punctuation aside) score as mostly anomalous."""
    if segment is None or not segment.words:
        return False
    words = [w for w in segment.words if w.word not in PUNCTUATION][:8]
    score = sum(word_anomaly(w.probability, w.end - w.start) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


def _next_worded(segments: list[Segment]) -> Segment | None:
    return next((s for s in segments if s.words), None)


@dataclass(frozen=True)
class HallucinationCut:
    """What the rule decided for a window: keep its first ``kept`` segments (``drop``: none, and
    the window counts as not decoded) and start the next window ``advance`` frames after this
    one's start (None: where it would start without the rule)."""

    kept: int
    advance: int | None = None
    drop: bool = False


def cut_hallucinations(segments: list[Segment], threshold: float, start: int, end_frame: int, n_content: int,
                       last_speech_s: float, full_window_s: float = 30.0) -> HallucinationCut:
    """Apply the rule to the timed segments of the window from frame ``start`` to ``end_frame``
    (module docstring); ``n_content``: the recording's frames; ``last_speech_s``: the end of the
    last word before this window; ``full_window_s``: a full window's length (faster-whisper's
    ``chunk_length``), from which it measures the window's end even where the window is cut short."""
    window_start_s, window_s = start / 100, (end_frame - start) / 100
    first = _next_worded(segments)
    if is_anomaly(first):
        gap = first.start_s - window_start_s
        if gap > threshold:
            return HallucinationCut(0, round(gap * 100), drop=True)
    window_end_s = window_start_s + full_window_s  # a full window's end, as faster-whisper measures it
    last_end = last_speech_s
    for index, segment in enumerate(segments):
        if not segment.words:
            continue
        if is_anomaly(segment):
            following = _next_worded(segments[index + 1:])
            next_start = following.words[0].start if following is not None else window_start_s + window_s
            silence_before = (segment.start_s - last_end > threshold or segment.start_s < threshold
                              or segment.start_s - window_start_s < 2.0)
            silence_after = (next_start - segment.end_s > threshold or is_anomaly(following)
                             or window_end_s - segment.end_s < 2.0)
            if silence_before and silence_after:
                seek = round(max(window_start_s + 1, segment.start_s) * 100)
                if n_content / 100 - segment.end_s < threshold:
                    seek = n_content
                return HallucinationCut(index, seek - start)
        last_end = segment.end_s
    return HallucinationCut(len(segments))
