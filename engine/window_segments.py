"""A decoded window's segments: split at its timestamps (or the whole window), timed to their
words where asked, hallucinations over silence cut, segments timed over far more than their words
fitted to them (``early_end``), and where the next window starts. Kept apart from the window loop
(``transcriber``) and the decoding (``window_decode``): it reads a window's tokens, never makes them."""

from __future__ import annotations

import numpy as np

from .backend import LoadedModel
from .early_end import overlong_segment, words_past_speech
from .fallback import Attempt
from .features import FRAMES_PER_SECOND, N_FRAMES
from .hallucination import cut_hallucinations
from .results import Segment, WindowResult
from .run_state import RunState
from .timestamps import split_window


def early_end_applies(run: RunState) -> bool:
    """Where ``early_end`` may move the next window's start: full windows (a short encoder window
    is the whole clip), and not where ``hallucination_silence_threshold`` decides it."""
    return run.ctx_frames == N_FRAMES and run.opts.hallucination_silence_threshold is None


class WindowSegments:
    """Segments of the windows one engine decodes (word alignment runs its model's cross-attention)."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.tokenizer = lm.tokenizer

    def result(self, run: RunState, attempt: Attempt, start: int, end_frame: int, encoder_output,
               language: str, samples: np.ndarray) -> WindowResult:
        """The window's segments (and their words), and where the next window starts; ``samples``:
        the window's audio (where its speech lies, for ``_fit_to_words``)."""
        eot = self.tokenizer.special.eot
        emitted = [t for t in attempt.tokens if t != eot]
        if run.timestamps:
            # faster-whisper seeks to a short window's last pair wherever it lies (see split_window)
            limit = N_FRAMES if run.opts.window_frames < N_FRAMES else None
            split = split_window(emitted, self.tokenizer.special.timestamp_begin, eot, start / 100, end_frame - start,
                                 max_advance=limit)
            segments = [Segment(a, b, self.tokenizer.decode(part), list(tokens))
                        for a, b, part, tokens in split.segments]
            run.tail = split.tail
            advance = split.advance_frames
        else:
            text_tokens = [t for t in emitted if t < eot]
            segments = [Segment(start / 100, end_frame / 100, self.tokenizer.decode(text_tokens), emitted)]
            advance = end_frame - start
        if run.opts.word_timestamps:
            before = run.last_speech
            advance = self._add_words(run, segments, encoder_output, start, end_frame, language, advance,
                                      single_ending=run.timestamps and split.single_ending)
            if run.opts.hallucination_silence_threshold is not None:
                segments, advance = self._cut_hallucinations(run, segments, start, end_frame, advance, before)
        overlong = [i for i, seg in enumerate(segments) if seg.text.strip() and
                    overlong_segment(seg.start_s, seg.end_s, sum(1 for t in seg.tokens if t < eot))]
        run.aligned_end = bool(overlong) and not run.opts.word_timestamps and self._may_align_end(run) and \
            self._fit_to_words(run, segments, overlong, encoder_output, samples, start, end_frame, language)
        segments = [seg for seg in segments if seg.end_s != seg.start_s and seg.text.strip()]
        for seg in segments:
            run.previous.extend(seg.tokens)
            run.tokens.extend(t for t in seg.tokens if t < eot)
        return WindowResult(start / 100, (start + advance) / 100, "".join(seg.text for seg in segments), emitted,
                            "", "", {}, segments, attempt.temperature, attempt.avg_logprob, attempt.no_speech_prob,
                            attempt.compression_ratio, start)

    @staticmethod
    def _cut_hallucinations(run: RunState, segments: list[Segment], start: int, end_frame: int, advance: int,
                            last_speech: float) -> tuple[list[Segment], int]:
        """``hallucination_silence_threshold`` (``hallucination``): the segments kept, where the
        next window starts; the last speech is the last kept word's end."""
        cut = cut_hallucinations(segments, run.opts.hallucination_silence_threshold, start, end_frame,
                                 run.n_content, last_speech, full_window_s=run.opts.window_frames / FRAMES_PER_SECOND)
        run.dropped = cut.drop
        kept = segments[:cut.kept]
        ends = [seg.words[-1].end for seg in kept if seg.words]
        run.last_speech = ends[-1] if ends else last_speech
        return kept, advance if cut.advance is None else cut.advance

    @staticmethod
    def _may_align_end(run: RunState) -> bool:
        """Whether a window's overlong segments may be fitted to their words: where a restart may
        follow (``WhisperEngine._may_restart``'s full windows, no ``hallucination_silence_threshold``) and in
        transcription only (English words aligned against speech in another language end anywhere)."""
        return run.timestamps and run.opts.task == "transcribe" and early_end_applies(run)

    def _fit_to_words(self, run: RunState, segments: list[Segment], overlong: list[int], encoder_output,
                      samples: np.ndarray, start: int, end_frame: int, language: str) -> bool:
        """Segments ``overlong`` (timed over far more than their words: ``early_end``) start where
        their first word does (a subtitle after noise shows when it is said, not at the window's
        edge) and the window's last one with text ends where its last word does, so that
        ``restart_frame`` can ask whether speech went on after it; whether that end moved. The words
        are aligned as ``word_timestamps`` aligns them, and not kept. An alignment that puts a
        segment's words past speech it was decoded over (``words_past_speech``) is redone over the
        audio before them; a segment whose words are past speech even then keeps its decoded times
        (moved to them, its end would leave that speech unasked about)."""
        timed = self._aligned(run, segments, encoder_output, start, end_frame, language)
        doubted = self._past_speech(segments, overlong, timed, samples, start)
        if doubted:
            before = round(timed[doubted[0]].words[0].start * 100)
            timed = self._aligned(run, segments, encoder_output, start, before, language)
            doubted = self._past_speech(segments, overlong, timed, samples, start)
            overlong = [i for i in overlong if i not in doubted]
        for i in overlong:
            seg, words = segments[i], timed[i].words
            if words and seg.start_s < words[0].start < seg.end_s:
                seg.start_s = words[0].start
        last = max(i for i, seg in enumerate(segments) if seg.text.strip())
        seg, words = segments[last], timed[last].words
        if last in overlong and words and seg.start_s < words[-1].end < seg.end_s:
            seg.end_s = words[-1].end
            return True
        return False

    @staticmethod
    def _past_speech(segments: list[Segment], overlong: list[int], timed: list, samples: np.ndarray,
                     start: int) -> list[int]:
        """The segments ``overlong`` whose aligned words (``timed``) start past speech they were
        decoded over (``words_past_speech``), in order."""
        return [i for i in overlong if timed[i].words and
                words_past_speech(samples, start / 100, segments[i].start_s, timed[i].words[0].start)]

    def _aligned(self, run: RunState, segments: list[Segment], encoder_output, start: int, end_frame: int,
                 language: str) -> list:
        """The window's segments with their words, from one cross-attention alignment of their
        tokens (``word_timestamps``) over the window's audio up to ``end_frame``; the segments
        themselves are not changed."""
        from .word_timestamps import SegmentTokens, add_word_timestamps

        return add_word_timestamps(self.lm.model, self.tokenizer, encoder_output,
                                   self.tokenizer.sot_sequence(language, run.opts.task, timestamps=True),
                                   [SegmentTokens(seg.tokens, seg.start_s, seg.end_s) for seg in segments],
                                   end_frame - start, start / 100, language, run.opts.prepend_punctuations,
                                   run.opts.append_punctuations, last_speech_timestamp=run.last_speech)

    def _add_words(self, run: RunState, segments: list[Segment], encoder_output, start: int, end_frame: int,
                   language: str, advance: int, single_ending: bool) -> int:
        """Word timings of the window's segments from the cross-attention alignment (see
        ``word_timestamps``); segment edges move to their words, and where the window's last
        segment was cut off the next window starts at its last word's end (faster-whisper's
        rule). Returns the frames the next window starts after this one's start."""
        timed = self._aligned(run, segments, encoder_output, start, end_frame, language)
        for seg, words in zip(segments, timed):
            seg.start_s, seg.end_s, seg.words = words.start, words.end, words.words
        ends = [seg.words[-1].end for seg in segments if seg.words]
        if ends:
            run.last_speech = ends[-1]
            if not single_ending and ends[-1] > start / 100:
                advance = round(ends[-1] * 100) - start
        return advance

