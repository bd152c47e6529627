"""Output files (txt, json, srt, vtt), each written atomically.

srt/vtt cues are the transcript's segments; with word timings, ``CueOptions`` cuts and wraps them
by words as openai-whisper's ``--max_words_per_line`` / ``--max_line_width`` do (without its
``--max_line_count`` and ``--highlight_words``). A cue never ends where it starts (``lengthen_cues``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .io_utils import atomic_write_text, write_failure
from .results import Segment
from .word_timestamps import Word

FORMATS = ("txt", "json", "srt", "vtt")


class Transcript(Protocol):
    """What the writers read: a ``Result``, or the CLI's transcript of faster-whisper's API."""

    text: str

    @property
    def segments(self) -> list[Segment]: ...

    @property
    def duration_s(self) -> float: ...

    def to_dict(self) -> dict:  # the JSON's content, segments included (``Segment.to_dict``)
        ...


@dataclass(frozen=True)
class CueOptions:
    """How srt/vtt cues are cut from word timings. ``max_words_per_line``: a cue holds at most this
    many words of one segment; ``max_line_width``: a cue's lines break before a word that would
    make them longer than this many characters (a longer word gets a line of its own)."""

    max_line_width: int | None = None
    max_words_per_line: int | None = None

    @property
    def by_words(self) -> bool:
        return self.max_line_width is not None or self.max_words_per_line is not None


def _timestamp(seconds: float, sep: str) -> str:
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def render(result: Transcript, fmt: str, extra: dict | None = None, cues: CueOptions | None = None) -> str:
    if fmt == "txt":
        return result.text + "\n"
    if fmt == "json":
        data = result.to_dict()
        if extra:
            data.update(extra)
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    timed = subtitle_cues(result, cues or CueOptions())
    if fmt == "srt":
        return "".join(f"{i}\n{_timestamp(a, ',')} --> {_timestamp(b, ',')}\n{text}\n\n"
                       for i, (a, b, text) in enumerate(timed, 1))
    if fmt == "vtt":
        return "WEBVTT\n\n" + "".join(f"{_timestamp(a, '.')} --> {_timestamp(b, '.')}\n{text}\n\n"
                                      for a, b, text in timed)
    raise ValueError(f"unknown format {fmt}")


# A cue that rounds to no length gets at least this long (one short spoken word: ~3 words a second).
MIN_CUE_S = 0.3


def subtitle_cues(result: Transcript, options: CueOptions) -> list[tuple[float, float, str]]:
    """The srt/vtt cues of ``result`` as written: ``iter_cues``'s, ending with the media (Whisper
    may time a last segment past the audio) and each lasting at least a millisecond
    (``lengthen_cues``: a word Whisper timed with start == end is otherwise never shown)."""
    timed = list(iter_cues(result.segments, options))
    duration = getattr(result, "duration_s", None)
    if duration is not None:
        timed = [(min(a, duration), min(b, duration), text) for a, b, text in timed]
    return lengthen_cues(timed, duration)


def lengthen_cues(cues: Sequence[tuple[float, float, str]],
                  media_end: float | None = None) -> list[tuple[float, float, str]]:
    """``cues`` (in time order) with no cue of zero length, none overlapping the next, no word dropped.

    Whisper's word timings give some words start == end (tiny.en on the LJ passage: ' setting,' at
    80.86-80.86 s), and a segment past the audio's end is clamped to it. WebVTT requires end >
    start and players skip such a cue, so the word never appears. A subtitle user expects the word
    on screen at the time it is said, so the cue stays where Whisper put it and gains up to
    ``MIN_CUE_S``: first forward, into the gap before the next cue (the word starts there); where
    the next cue starts at once, backward into the gap after the previous one (it was said just
    before). Only where both neighbours touch it is there no time of its own to give: the word
    then joins the next cue (shown with the words said at the same instant) or, last of all, the
    previous one, as a line of its own, so ``max_words_per_line`` and ``max_line_width`` still
    hold for every line. Times are worked in whole milliseconds, as the files write them.
    """
    ms = [(_ms(a), _ms(b), text) for a, b, text in cues]
    end = _ms(media_end) if media_end is not None else None
    out: list[tuple[int, int, str]] = []
    carried: tuple[int, str] | None = None  # a cue with no time of its own, joining the next
    for i, (a, b, text) in enumerate(ms):
        if carried is not None:
            a, text, carried = min(a, carried[0]), f"{carried[1]}\n{text}", None
        if b > a:
            out.append((a, b, text))
            continue
        after = ms[i + 1][0] if i + 1 < len(ms) else end
        before = out[-1][1] if out else 0
        timed = _give_length(a, b, after, before)
        if timed is not None:
            out.append((*timed, text))
        elif i + 1 < len(ms):
            carried = (a, text)
        elif out:
            out[-1] = (out[-1][0], out[-1][1], f"{out[-1][2]}\n{text}")
        else:  # a lone cue at 0 s in media of no length: nothing to share, it gains its time anyway
            out.append((a, a + _ms(MIN_CUE_S), text))
    return [(a / 1000, b / 1000, text) for a, b, text in out]


def _give_length(start: int, end: int, after: int | None, before: int) -> tuple[int, int] | None:
    """(start, end) ms of a zero-length cue given up to ``MIN_CUE_S``: forward up to ``after`` (the
    next cue's start or the media's end), else backward down to ``before`` (the previous cue's end);
    None where neither side has a millisecond free."""
    bound = _ms(MIN_CUE_S)
    forward = start + bound if after is None else min(start + bound, after)
    if forward > start:
        return start, forward
    backward = max(end - bound, before)
    if backward < end:
        return backward, end
    return None


def _ms(seconds: float) -> int:
    """Seconds as the whole milliseconds srt and vtt write (``_timestamp`` rounds the same way)."""
    return int(round(seconds * 1000))


def iter_cues(segments: Sequence[Segment], options: CueOptions) -> Iterator[tuple[float, float, str]]:
    """(start s, end s, text) of each cue: one per segment, or with ``options.by_words`` groups of a
    segment's words, timed from their first word's start to their last word's end. A segment
    without words (none aligned) stays one cue."""
    for segment in segments:
        if not segment.text.strip():  # timestamped segments, or whole windows
            continue
        if options.by_words and segment.words:
            yield from _word_cues(segment.words, options)
        else:
            yield segment.start_s, segment.end_s, segment.text.strip()


def _word_cues(words: Sequence[Word], options: CueOptions) -> Iterator[tuple[float, float, str]]:
    size = options.max_words_per_line or len(words)
    for first in range(0, len(words), size):
        group = words[first:first + size]
        yield group[0].start, group[-1].end, wrap_words([w.word for w in group], options.max_line_width)


def wrap_words(words: Sequence[str], width: int | None) -> str:
    """Words (each with its leading space, as Whisper emits them) as lines of at most ``width``
    characters, counting the spaces between words; a line's first word loses its space."""
    text, length = "", 0
    for word in words:
        if length and (width is None or length + len(word) <= width):
            text, length = text + word, length + len(word)
        else:
            stripped = word.strip()
            text, length = text + ("\n" if length else "") + stripped, len(stripped)
    return text


def write_result(result: Transcript, audio_path: str | Path, output_dir: str | Path, fmt: str,
                 extra: dict | None = None, cues: CueOptions | None = None) -> Path:
    """Write ``<output_dir>/<stem>.<fmt>``; the file appears whole or not at all. A disk that is
    full or read-only raises ``OutputError`` (what, where, what to do), leaving nothing behind."""
    path = output_path(audio_path, output_dir, fmt)
    text = render(result, fmt, extra, cues)
    try:
        return atomic_write_text(path, text)
    except OSError as exc:
        raise write_failure(exc, path, f"the {fmt} output", option="output-dir") from None


def output_path(audio_path: str | Path, output_dir: str | Path, fmt: str) -> Path:
    """Where the output of ``audio_path`` in format ``fmt`` goes."""
    return Path(output_dir) / f"{Path(audio_path).stem}.{fmt}"
