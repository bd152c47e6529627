"""Long files cut into pieces that workers decode independently, and stitched back.

A file longer than 1.5 x ``piece_s`` is cut near every multiple of ``piece_s``, inside a silence:
the middle of the longest gap between Silero VAD's speech chunks within a quarter of a piece of the
target (the ``[vad]`` extra), else the quietest 200 ms there by frame energy. Each piece decodes as
a recording of its own; stitching shifts its segments' (and words') times by the piece's start.

How this differs from decoding the file in one go: there, each 30 s window starts where the last
window's last complete segment ended, and (with ``--condition-on-previous-text``) is prompted
with the text before it; a piece starts a fresh window at its cut, with no text before it, and
without ``--language`` detects its language on its own first window. Cutting inside a silence keeps
words whole; the text can still differ near a cut, where the windows fall differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..audio import SAMPLE_RATE
from ..features import N_FRAMES
from ..results import Segment
from ..word_timestamps import Word
from .inputs import BatchItem

SEARCH = 0.25  # a cut is looked for within this fraction of a piece around its target
QUIET_S = 0.2  # the stretch whose energy is compared where there is no VAD


def plan_pieces(item: BatchItem, waveform: np.ndarray, piece_s: float) -> tuple[list[BatchItem], str]:
    """``item`` as pieces (``[item]`` where it is short) and how the cuts were found (vad/energy)."""
    duration = len(waveform) / SAMPLE_RATE
    if duration <= 1.5 * piece_s:
        return [item], "none"
    gaps, method = _silences(waveform)
    cuts, target = [0.0], piece_s
    while duration - target > 0.5 * piece_s:
        cut = _cut_near(waveform, gaps, target, piece_s)
        cuts.append(cut)
        target = cut + piece_s
    cuts.append(duration)
    pieces = [replace(item, name=f"{item.name}@{round(a * 1000)}-{round(b * 1000)}", duration_s=b - a,
                      start_s=a, end_s=b, parent=item.name, timestamps_on=duration > N_FRAMES / 100)
              for a, b in zip(cuts, cuts[1:])]
    return pieces, method


def _silences(waveform: np.ndarray) -> tuple[list[tuple[float, float]], str]:
    """Gaps between speech (seconds), or none where the VAD is not installed."""
    from ..errors import SpecWhisperError
    from ..vad import VadOptions, get_speech_timestamps

    try:
        chunks = get_speech_timestamps(waveform, VadOptions(min_silence_duration_ms=100, speech_pad_ms=0))
    except SpecWhisperError:  # no [vad] extra: energy it is
        return [], "energy"
    edges = [(0.0, 0.0)] + [(c["start"] / SAMPLE_RATE, c["end"] / SAMPLE_RATE) for c in chunks]
    gaps = [(a_end, b_start) for (_, a_end), (b_start, _) in zip(edges, edges[1:]) if b_start > a_end]
    return gaps, "vad"


def _cut_near(waveform: np.ndarray, gaps: list[tuple[float, float]], target: float, piece_s: float) -> float:
    low, high = target - SEARCH * piece_s, target + SEARCH * piece_s
    inside = [(min(b, high) - max(a, low), -abs((a + b) / 2 - target), a, b) for a, b in gaps if b > low and a < high]
    if inside:
        _, _, a, b = max(inside)
        return round((max(a, low) + min(b, high)) / 2, 3)
    return _quietest(waveform, low, high)


def _quietest(waveform: np.ndarray, low: float, high: float) -> float:
    """The middle of the quietest ``QUIET_S`` stretch between ``low`` and ``high`` seconds."""
    start, stop = int(low * SAMPLE_RATE), min(int(high * SAMPLE_RATE), len(waveform))
    width = int(QUIET_S * SAMPLE_RATE)
    power = np.convolve(np.square(waveform[start:stop], dtype=np.float64), np.ones(width), mode="valid")
    return round((start + int(np.argmin(power)) + width // 2) / SAMPLE_RATE, 3)


@dataclass
class StitchedTranscript:
    """A file's pieces as one transcript, read by the writers as a ``Result`` is."""

    text: str
    tokens: list[int]
    segments: list[Segment]
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"text": self.text, "tokens": self.tokens, **self.info, "segments": [s.to_dict() for s in self.segments]}


def stitch(pieces: list[tuple[BatchItem, dict]], method: str) -> StitchedTranscript:
    """Pieces' JSON transcripts (in order) as one, times shifted by each piece's start and kept
    within the piece: a window's timestamps can reach into the padding after a piece's last
    sample (a model looping on its last words ran 0.44 s past a cut), and the next piece's times
    start at that cut."""
    segments, tokens, texts, stats = [], [], [], {}
    for item, data in pieces:
        offset = item.start_s or 0.0
        end = float("inf") if item.end_s is None else item.end_s
        tokens += data["tokens"]
        texts.append(data["text"].strip())
        for s in data["segments"]:
            words = None if s.get("words") is None else [
                Word(min(w["start"] + offset, end), min(w["end"] + offset, end), w["word"], w["probability"]) for w in s["words"]]
            segments.append(Segment(min(s["start_s"] + offset, end), min(s["end_s"] + offset, end), s["text"], [], words))
        for key, value in (data.get("stats") or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                stats[key] = stats.get(key, 0) + value
    first = pieces[0][1]
    info = {"language": first.get("language"), "task": first.get("task", "transcribe"),
            "duration_s": round(pieces[-1][0].end_s or 0.0, 3),
            "numerics": first.get("numerics"), "stats": stats,
            "pieces": [{"start_s": item.start_s, "end_s": item.end_s, "language": data.get("language"),
                        "numerics": data.get("numerics")} for item, data in pieces],
            "cut_by": method}
    return StitchedTranscript(" ".join(t for t in texts if t), tokens, segments, info)
