"""Timestamp decoding: the logit rules that keep timestamp tokens well formed, and the seek step.

Long audio is decoded like Whisper was trained and like faster-whisper does by default: each
window's tokens carry timestamps (``<|t0|> text <|t1|><|t1|> text <|t2|>``), complete segments are
kept, and the next window starts where the last complete segment ended, so speech cut at a window
edge is decoded again whole instead of being lost.

The rules are those of CTranslate2's ``ApplyTimestampRules`` (what ``generate`` and faster-whisper
apply), written as a function of one row's logits and the tokens emitted before it. The verifier
applies them to every row it scores, so the tokens stay a fixed function of each position's
logits: speculation still cannot change them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SECONDS_PER_TIMESTAMP = 0.02
FRAMES_PER_TIMESTAMP = 2  # mel frames are 10 ms
MAX_INITIAL_TIMESTAMP_INDEX = 50  # the first timestamp is at most 1.0 s (CT2's and openai's default)


@dataclass(frozen=True)
class TimestampRules:
    """Which tokens a position may emit, given the window's tokens before it."""

    eot: int
    no_timestamps: int
    timestamp_begin: int
    vocab_size: int
    max_initial_index: int = MAX_INITIAL_TIMESTAMP_INDEX

    def apply(self, emitted: Sequence[int], scores: np.ndarray) -> None:
        """Set forbidden tokens of one row to -inf, in place (suppressed ids are already -inf).

        * never ``<|notimestamps|>``;
        * the first token is a timestamp of at most ``max_initial_index``;
        * after ``text <|t|>`` only a timestamp or EOT; after ``<|t|><|t|>`` (or a lone first
          ``<|t|>``) no timestamp: timestamps come in pairs, except right before EOT;
        * timestamps never decrease;
        * where the timestamps together are likelier than any single text token, a timestamp.
        """
        tb = self.timestamp_begin
        scores[self.no_timestamps] = -np.inf
        if not emitted:
            scores[:tb] = -np.inf
            scores[tb + self.max_initial_index + 1:] = -np.inf
            return
        check = True
        last = emitted[-1]
        if last >= tb:
            penultimate = emitted[-2] if len(emitted) > 1 else last
            if penultimate >= tb:
                scores[tb:] = -np.inf
                check = False
            else:
                scores[:self.eot] = -np.inf
        for token in reversed(emitted):
            if token >= tb:
                scores[tb:token] = -np.inf
                break
        if check and _timestamps_likelier(scores, tb):
            scores[:tb] = -np.inf


def _timestamps_likelier(scores: np.ndarray, tb: int) -> bool:
    """log-sum-exp over timestamp logits > the largest text logit (softmax's shared norm cancels)."""
    stamps = scores[tb:].astype(np.float64)
    top = stamps.max()
    if not np.isfinite(top):
        return False
    text_top = float(scores[:tb].max())
    return float(top + np.log(np.exp(stamps - top).sum())) > text_top


@dataclass(frozen=True)
class WindowSplit:
    """One decoded window cut into complete segments, and where the next window starts."""

    segments: list[tuple[float, float, list[int], list[int]]]  # (start s, end s, text tokens, all tokens)
    kept: list[int]  # the tokens of the complete segments, timestamps included (the next prompt)
    advance_frames: int  # how far the next window starts after this one
    tail: list[int]  # the incomplete last segment, its timestamps shifted to the next window
    single_ending: bool = False  # text then one timestamp at the end: nothing was cut off


def split_window(tokens: Sequence[int], timestamp_begin: int, eot: int, offset_s: float,
                 window_frames: int, max_advance: int | None = None) -> WindowSplit:
    """Segments of a window's tokens (EOT excluded) decoded with timestamps.

    As in Whisper's own long-form loop: pairs ``<|t|><|t|>`` close segments; a window that ends
    with a single timestamp after text, or has no pair at all, is complete and the next window
    starts after it; otherwise the text after the last pair is incomplete, and the next window
    starts at that pair's time. ``window_frames``: the window's content (at most 3000 frames).
    ``max_advance``: the farthest that pair may move the next window (default ``window_frames``;
    a window shorter than the encoder input, faster-whisper's ``chunk_length``, passes 3000: its
    timestamps can reach into the padding, and faster-whisper seeks to them unclamped).
    """
    tokens = [t for t in tokens if t != eot]
    tb = timestamp_begin

    def seconds(token: int) -> float:
        return offset_s + (token - tb) * SECONDS_PER_TIMESTAMP

    def segment(part: Sequence[int]) -> tuple[float, float, list[int], list[int]]:
        text = [t for t in part if t < eot]
        stamps = [t for t in part if t >= tb]
        start = seconds(stamps[0]) if stamps else offset_s
        end = seconds(stamps[-1]) if len(stamps) > 1 else offset_s + window_frames / 100
        return start, max(start, end), text, list(part)

    is_ts = [t >= tb for t in tokens]
    pairs = [i for i in range(1, len(tokens)) if is_ts[i] and is_ts[i - 1]]
    single_ending = len(tokens) >= 2 and is_ts[-1] and not is_ts[-2]
    if not pairs:
        # Whisper's (and faster-whisper's) rule for a window without a pair: one segment from the
        # window's start to its last timestamp, or to the window's end where there is none or it is 0.00
        stamps = [t for t in tokens if t >= tb]
        end = seconds(stamps[-1]) if stamps and stamps[-1] != tb else offset_s + window_frames / 100
        text = [t for t in tokens if t < eot]
        segments = [(offset_s, max(offset_s, end), text, list(tokens))] if text else []
        return WindowSplit(segments, list(tokens), window_frames, [], single_ending)
    cuts = pairs + ([len(tokens)] if single_ending else [])
    segments, begin = [], 0
    for cut in cuts:
        part = tokens[begin:cut]
        if any(t < eot for t in part):
            segments.append(segment(part))
        begin = cut
    if single_ending:
        return WindowSplit(segments, list(tokens), window_frames, [], True)
    last = pairs[-1]
    advance = (tokens[last - 1] - tb) * FRAMES_PER_TIMESTAMP
    if advance <= 0:  # a pair at 0.00 would never move on: take the whole window
        return WindowSplit(segments, list(tokens), window_frames, [])
    shift = tokens[last] - tb
    tail = [t - shift if t >= tb else t for t in tokens[last:]]
    limit = window_frames if max_advance is None else max_advance
    return WindowSplit(segments, list(tokens[:last]), min(advance, limit), tail)
