"""Word-level timestamps from cross-attention alignment, with faster-whisper 1.2.1's semantics.

CTranslate2's ``Whisper.align`` gives a monotonic path through the alignment heads' attention
(token index, encoder frame); a word starts where the path first reaches its first token. Times
are then tidied exactly as faster-whisper does (users compare the two): sentence marks clipped to
twice the median word length, punctuation folded into neighbours, the first word after a pause
shortened, segment edges reconciled with the decoded timestamps.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, field

import numpy as np

from .tokenizer import WhisperTokenizer

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
# Scripts written without spaces: a "word" is whatever decodes to whole unicode characters.
UNICODE_WORD_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
TOKENS_PER_SECOND = 50  # encoder frames: 16000 Hz / (hop 160 * stride 2)
MEDIAN_DURATION_CAP = 0.7  # seconds


@dataclass
class Word:
    start: float
    end: float
    word: str
    probability: float

    def _asdict(self) -> dict:
        """faster-whisper's ``Word`` offers this (as the namedtuple it once was); callers use it."""
        return asdict(self)


@dataclass
class SegmentTokens:
    """One decoded segment of a window: its tokens (timestamps are ignored) and decoded times (s)."""

    tokens: list[int]
    start: float
    end: float


@dataclass
class TimedSegment:
    """A segment's words and its times after reconciling them with the words (as faster-whisper does)."""

    start: float
    end: float
    words: list[Word] = field(default_factory=list)


@dataclass
class _Timing:
    """A word during alignment: times in seconds from the window start, mutable for the heuristics."""

    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def split_on_unicode(tokenizer: WhisperTokenizer, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    """Groups tokens into the shortest runs that decode to whole characters."""
    full = tokenizer.decode(tokens)
    words: list[str] = []
    groups: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for token in tokens:
        current.append(token)
        text = tokenizer.decode(current)
        bad = text.find("\ufffd")  # a character cut in half, unless the text really has one
        if bad < 0 or (bad + offset < len(full) and full[bad + offset] == "\ufffd"):
            words.append(text)
            groups.append(current)
            current = []
            offset += len(text)
    return words, groups


def split_on_spaces(tokenizer: WhisperTokenizer, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    """Joins character runs into words: a run starts a new word when it is a control token, begins
    with a space or is punctuation (a substring of ``string.punctuation``, as upstream tests it)."""
    words: list[str] = []
    groups: list[list[int]] = []
    for text, group in zip(*split_on_unicode(tokenizer, tokens)):
        if group[0] >= tokenizer.special.eot or text.startswith(" ") or text.strip() in string.punctuation \
                or not words:
            words.append(text)
            groups.append(group)
        else:
            words[-1] += text
            groups[-1].extend(group)
    return words, groups


def split_words(tokenizer: WhisperTokenizer, tokens: list[int], language: str) -> tuple[list[str], list[list[int]]]:
    if language in UNICODE_WORD_LANGUAGES:
        return split_on_unicode(tokenizer, tokens)
    return split_on_spaces(tokenizer, tokens)


def merge_punctuations(timings: list[_Timing], prepend: str, append: str) -> None:
    """Folds opening punctuation into the word after it and closing punctuation into the word
    before it, leaving an empty word (no tokens) in its place. Membership is a substring test,
    as upstream's, so an empty word counts as punctuation: that keeps the merge target in place."""
    target = len(timings) - 1
    for i in range(len(timings) - 2, -1, -1):
        prev, nxt = timings[i], timings[target]
        if prev.word.startswith(" ") and prev.word.strip() in prepend:
            nxt.word, nxt.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            prev.word, prev.tokens = "", []
        else:
            target = i
    target = 0
    for j in range(1, len(timings)):
        prev, nxt = timings[target], timings[j]
        if not prev.word.endswith(" ") and nxt.word in append:
            prev.word, prev.tokens = prev.word + nxt.word, prev.tokens + nxt.tokens
            nxt.word, nxt.tokens = "", []
        else:
            target = j


def _align(model, tokenizer: WhisperTokenizer, encoder_output, sot_sequence: list[int], text_tokens: list[int],
           num_frames: int, language: str) -> list[_Timing]:
    """Word timings (seconds from the window start) and mean token probabilities for one window."""
    if not text_tokens:
        return []
    result = model.align(encoder_output, sot_sequence, [text_tokens], num_frames, median_filter_width=7)[0]
    words, groups = split_words(tokenizer, text_tokens + [tokenizer.special.eot], language)
    if len(groups) <= 1:
        return []
    text_index = np.array([pair[0] for pair in result.alignments])
    time_index = np.array([pair[1] for pair in result.alignments])
    jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
    jump_times = time_index[jumps] / TOKENS_PER_SECOND  # the time each token is first attended
    bounds = np.pad(np.cumsum([len(g) for g in groups[:-1]]), (1, 0))
    probs = result.text_token_probs
    return [_Timing(w, g, jump_times[i], jump_times[j], float(np.mean(probs[i:j])))
            for w, g, i, j in zip(words, groups, bounds[:-1], bounds[1:])]


def _clip_sentence_ends(timings: list[_Timing], max_duration: float) -> None:
    """A sentence mark, or the word after one, often swallows the pause between sentences."""
    for prev, cur in zip(timings, timings[1:]):
        if cur.end - cur.start > max_duration:
            if cur.word in SENTENCE_END_MARKS:
                cur.end = cur.start + max_duration
            elif prev.word in SENTENCE_END_MARKS:
                cur.start = cur.end - max_duration


def _fix_edges(seg: TimedSegment, median: float, max_duration: float, last_speech: float) -> None:
    """Shortens the first words after a pause, then lets the decoded segment times win over a
    first/last word that overhangs them by more than half a second (else the words' times win)."""
    words = seg.words
    first = words[0]
    if first.end - last_speech > median * 4 and (
            first.end - first.start > max_duration
            or (len(words) > 1 and words[1].end - first.start > max_duration * 2)):
        if len(words) > 1 and words[1].end - words[1].start > max_duration:
            first.end = words[1].start = max(words[1].end / 2, words[1].end - max_duration)
        first.start = max(0.0, first.end - max_duration)
    if seg.start < first.end and seg.start - 0.5 > first.start:
        first.start = max(0.0, min(first.end - median, seg.start))
    else:
        seg.start = first.start
    last = words[-1]
    if seg.end > last.start and seg.end + 0.5 < last.end:
        last.end = max(last.start + median, seg.end)
    else:
        seg.end = last.end


def add_word_timestamps(model, tokenizer: WhisperTokenizer, encoder_output, sot_sequence: list[int],
                        segments: list[SegmentTokens], num_frames: int, time_offset: float, language: str,
                        prepend_punctuations: str = PREPEND_PUNCTUATIONS,
                        append_punctuations: str = APPEND_PUNCTUATIONS,
                        last_speech_timestamp: float = 0.0) -> list[TimedSegment]:
    """Words of one window's segments, aligned in one ``align`` call, with segment times adjusted.

    ``model``: the CTranslate2 Whisper; ``encoder_output``: the window's encoder output;
    ``sot_sequence``: SOT [language task] as decoded (no ``<|notimestamps|>``, like upstream);
    ``num_frames``: the window's content mel frames; ``time_offset``: the window start (s);
    ``last_speech_timestamp``: end of the last word before this window (0 at the start). The next
    window's ``last_speech_timestamp`` is the end of the last word returned here (what
    faster-whisper's loop passes on). Word times are rounded to 10 ms, as upstream's are.
    """
    eot = tokenizer.special.eot
    per_segment = [[t for t in s.tokens if t < eot] for s in segments]
    timings = _align(model, tokenizer, encoder_output, sot_sequence, [t for ts in per_segment for t in ts],
                     num_frames, language)
    durations = np.array([t.end - t.start for t in timings])
    durations = durations[durations.nonzero()]
    median = min(MEDIAN_DURATION_CAP, float(np.median(durations))) if len(durations) else 0.0
    max_duration = median * 2
    if len(durations):
        _clip_sentence_ends(timings, max_duration)
    merge_punctuations(timings, prepend_punctuations, append_punctuations)

    out: list[TimedSegment] = []
    index = 0
    for seg, tokens in zip(segments, per_segment):
        timed = TimedSegment(seg.start, seg.end)
        consumed = 0  # a word belongs to the segment holding its first token
        while index < len(timings) and consumed < len(tokens):
            t = timings[index]
            if t.word:
                timed.words.append(Word(float(np.round(time_offset + t.start, 2)),
                                        float(np.round(time_offset + t.end, 2)), t.word, t.probability))
            consumed += len(t.tokens)
            index += 1
        if timed.words:
            _fix_edges(timed, median, max_duration, last_speech_timestamp)
            last_speech_timestamp = timed.end
        out.append(timed)
    return out
