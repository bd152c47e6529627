"""Live transcription: audio chunks in, committed text and a tentative tail out (``engine.stream()``).

Whisper decodes windows, not streams. The standard way to run it live (whisper_streaming's
LocalAgreement-2, Macháček et al. 2023) decodes a growing audio buffer again and again and
commits what two consecutive passes agree on. This module runs that policy on the engine:

* every ``step_s`` of new audio, one **pass** decodes the uncommitted buffer as one window, with
  timestamps (so segment ends are known) and an encoder window fitted to the buffer
  (``audio_ctx="auto"``, as ``--audio-ctx auto`` does: a 6-20 s buffer costs a 6-20 s encoder);
* the longest token prefix this pass and the previous one agree on is **committed**, cut back to
  a word boundary (a word the newer pass may still extend is not committed). Timestamps agree
  with any timestamp: a segment end moving from 2.40 to 2.42 s as audio arrives is the same end;
* where a committed segment is closed (its end timestamp agreed), the buffer is **trimmed** at
  its end (the later of the two passes' ends: an end is a guess that can fall inside the last
  words): later passes decode only what is not final, so a pass costs what is new, not what was
  said a minute ago. A buffer that reaches ``max_buffer_s`` (15 s, whisper_streaming's default,
  or two steps where they are longer)
  with no committed segment end is cut after its last committed word (word timestamps, one extra
  decoding; also where nothing was agreed and the pass found no segment end: the audio after its
  last word stays): memory stays bounded, and a long forced prefix cannot drag the decoder on (a digit
  list went on over the next sentence);
* committed text of a segment still open in the buffer is **forced** as the next pass's prefix
  (token ids, its timestamp first): committed text is never decoded again, so it cannot be
  retracted, and no heuristic has to find where old text ends in a new pass (whisper_streaming
  re-decodes it and removes overlapping n-grams). Text committed before the buffer is the
  pass's **prompt** (previous text), as whisper_streaming's init prompt;
* a pass that **loops** (Whisper repeating itself where speech is cut off: "seven, seven, ...")
  is capped a few tokens past the previous pass and cut after the first copy of the repetition,
  so that two looping passes cannot agree on a loop and commit it (see ``_run``);
* a pass that is **unsure** (mean token log-probability below ``LOW_CONFIDENCE``, -0.65) commits
  nothing and is not agreed with: on hard audio (a digit list in a 2-8 s buffer) base said "I'm not
  sure if I'm not mistaken" pass after pass at -0.7 to -1.6 while sure passes run -0.1 to -0.55,
  and two such passes agreed; the buffer then grows until a pass hears enough to be sure; a pass
  that looped (cut, or creeping) is unsure too: cut loops still agreed on their first turns
  ("1, 2, 3, 6" of "2, 3, 6, 2, 3, 6, ...") and the trimmed buffer lost the sentence after them.
  A pass that **copies its prompt** (8 tokens in a row of the committed text before the buffer)
  with more text than its audio could hold (over ``SPEECH_TOKENS_PER_S``: Whisper's way with a tail
  of too little speech; speech that repeats itself is not flagged) is unsure too. The last pass
  (``finish``) commits all it hears, unless after other passes it looped, copied its prompt, or
  was unsure on less than ``LAST_TAIL_S`` of audio: then only what the pass before said too, where
  that pass was sure (on half a second left after a trim, base looped on the committed sentence,
  wrote out the whole stream again, or said "Bye." at -0.86 on the breath after jfk's last word).
  A last pass whose text ends (a segment end, then nothing) at least ``REST_SPEECH_S`` of speech
  before the buffer's end keeps that rest and decodes it in another last pass: Whisper's rule
  "a single timestamp ending means no speech after it", which the offline path checks too
  (``early_end``), dropped " jazz in the living room." (1.4 s of speech) after a last pass of
  tiny.en ended at "play some" (6.72 s of 8.5). Such a pass decodes the same buffer with all
  that was committed forced and a segment starting where its text ended (the rest alone, without
  the words before it, tiny.en heard as "heavy believing room."), and comes only after a pass that
  committed words and trimmed the buffer, at most ``REST_PASSES`` times;
* a **speech gate** (``endpointing``: Silero VAD where the ``[vad]`` extra is installed, frame
  energy otherwise; ``live_gate``) keeps passes off audio without speech: Whisper writes text into
  noise (" Thank you." on a quiet room after the last sentence, on every second of it), and a
  stream that decodes a silent room spends its CPU on that. A buffer without speech is not decoded
  (its last ``EMPTY_KEEP_S`` is kept: a word may be starting, and the detector hears an onset late),
  non-speech before that much of lead to the speech is dropped,
  and once ``silence_s`` of non-speech follows the speech the **utterance ends**: a last pass over
  the speech and its pad commits what it hears (as ``finish`` does, with the rules above) without
  waiting for two passes to agree, as whisper_streaming's voice-activity controller ends its
  buffer. A last pass that meets Whisper's no-speech rule (no-speech probability over 0.6 and mean
  log-probability under -1, the windows ``transcribe`` skips) commits nothing;
* the previous pass's tokens after the committed prefix are the **draft hint** of the next pass
  (``TranscribeOptions.draft_hint``, ``drafters/previous_pass.py``): most of a pass repeats the
  one before, and the verifier makes that repetition cheap without changing a token.

Passes happen at fixed points of the stream's clock (every ``step_s`` of audio fed), whatever
the chunk sizes: the same audio gives the same events, chunked in any way. A chunk longer than a
step runs one pass per step it completes. Times are in the stream's clock (seconds of audio fed).
"""

from __future__ import annotations

import time
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

import numpy as np

from .audio import SAMPLE_RATE
from .early_end import SPEECH_MIN_S, speech_seconds_in
from .errors import OptionError, SpecWhisperError
from .fallback import COMPRESSION_RATIO_THRESHOLD, compression_ratio
from .features import N_FRAMES
from .listen import check_range
from .live_agreement import agreed_length, copies_prompt, creeping_loop, cut_repetition, inner_loop
from .live_gate import GATES, SpeechGate
from .live_input import ChunkConsumer, ChunkQueue, check_consumer_args
from .model_limits import MAX_POSITIONS
from .results import WindowResult
from .timestamps import SECONDS_PER_TIMESTAMP
from .transcribe_options import checked_options
from .transcriber import LOOP_TOKENS_MIN, LOOP_TOKENS_PER_S, SILENCE_PEAK, WhisperEngine

WINDOW_SAMPLES = N_FRAMES * 160  # one pass sees at most one 30 s window
SAMPLES_PER_TIMESTAMP = round(SECONDS_PER_TIMESTAMP * SAMPLE_RATE)
MIN_STEP_S, MAX_STEP_S = 0.1, 10.0
MAX_BUFFER_S = 15.0  # whisper_streaming's default; at least two steps
LOOP_MARGIN = 16  # tokens a pass may emit beyond the previous pass's and a step's worth (see _run)
SPEECH_TOKENS_PER_S = 8.0  # more text than anyone speaks (English runs 3-5 tokens a second): see _run
LOW_CONFIDENCE = -0.65  # a pass whose mean token log-probability is below this commits nothing (see _pass)
EMPTY_KEEP_S = 1.0  # a pass that hears no words keeps this much of the buffer: a word may be starting
LAST_TAIL_S = 1.0  # a last pass on less audio than this after other passes commits only what it is sure of
REST_SPEECH_S = SPEECH_MIN_S  # speech after a last pass's text that another last pass decodes (see _speech_after_text)
REST_PASSES = 3  # more last passes after one, at most (each decodes the buffer again: finish's cost stays bounded)
SILENCE_S = 0.8  # the speech gate: this much non-speech after speech ends an utterance (see _pass)
PAD_S = 0.4  # the speech gate: audio kept each side of what the detector heard as speech
NO_SPEECH_P, NO_SPEECH_LOGPROB = 0.6, -1.0  # Whisper's no-speech rule (offline skips such windows)
LANGUAGE_MIN_S = 3.0  # language=None: a stream's language is fixed by its first sure pass over this much audio
# Committed tokens kept as the prompt: about whisper_streaming's 200 characters. Every pass
# prefills its prompt, and a long one costs: on an Intel Xeon (base int8, invariant decoder, 2
# cores, a slow spell) 34-43 ms with a bare SOT sequence, 56-71 ms with 64 tokens, 129-184 ms
# with 224, against about 5-8 ms a decoded token.
CONTEXT_TOKENS = 48
SET_BY_STREAM = ("timestamps", "prefix", "draft_hint", "clip_timestamps", "condition_on_previous_text",
                 "progress", "multilingual", "word_timestamps", "hallucination_silence_threshold", "max_new_tokens",
                 "chunk_length", "batch_size", "scores")


@dataclass(frozen=True)
class LiveEvent:
    """What a stream produced. ``kind``: ``commit`` (final text, never retracted; ``start_s`` the
    start of its segment, ``end_s`` its end where ``segment_end``, else the pass's estimate, which a
    later commit of the same segment may put earlier; a commit that only closes its segment has
    empty ``text``: a caption shows the segment's text so far and ends it there) or
    ``tentative`` (the text after the committed part in the latest pass, replaced by the next
    tentative event; empty once everything is committed)."""

    kind: str
    text: str
    start_s: float
    end_s: float
    segment_end: bool = False
    tokens: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {"type": self.kind, "text": self.text, "start_s": round(self.start_s, 3),
                "end_s": round(self.end_s, 3), "segment_end": self.segment_end}


@dataclass
class PassRecord:
    """One decoding pass, with what decoding it again needs (``decode_pass(engine, audio, **options)``)."""

    index: int
    offset_s: float  # stream time of the buffer's first sample
    audio: np.ndarray
    options: dict
    tokens: list[int]  # the window's tokens: forced prefix, text and timestamps (no EOT; none if skipped)
    numerics: str  # what the window was decoded in ("skipped": silence, nothing decoded)
    stats: dict
    seconds: float


def unspaced_script(char: str) -> bool:
    """Whether ``char`` is of a script written without spaces between words (kana, Chinese
    characters, Thai, Lao, Burmese: the languages word timestamps split on characters), where
    every character can end a word: a stream of Japanese or Chinese committed nothing until a
    segment ended, since no token there started with a space. By the character, not the stream's
    language: Latin words inside Chinese text, or an English translation, still end at spaces."""
    return ("\u3040" <= char <= "\u30ff" or "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff"
            or "\u0e00" <= char <= "\u0eff" or "\u1000" <= char <= "\u109f")


def decode_pass(engine: WhisperEngine, audio: np.ndarray, **options) -> tuple[WindowResult, object]:
    """Decode ``audio`` as one window (the first of ``engine.transcription``, which decodes lazily,
    so nothing after it runs). Returns the window and the transcription (its language, timings)."""
    transcription = engine.transcription(audio, **options)
    for window in transcription:
        return window, transcription
    raise SpecWhisperError("a live pass produced no window", where="live pass")  # not reached: audio is non-empty


def check_gate_options(endpointing: str = "auto", silence_s: float = SILENCE_S, pad_s: float = PAD_S,
                       vad_threshold: float = 0.5) -> None:
    """Raise ``OptionError`` for a speech-gate option out of range (the CLI asks before loading a model)."""
    if endpointing not in GATES:
        raise OptionError(f"unknown endpointing {endpointing!r}", where="endpointing",
                          hint="use auto (Silero VAD where the [vad] extra is installed, else frame energy), "
                               "vad, energy or off (decode every step whatever the audio holds)")
    check_range("silence_s", silence_s, 0.1, 5.0, f"e.g. {SILENCE_S} (non-speech that ends an utterance)",
                cli=("--silence-ms", 1000))
    check_range("pad_s", pad_s, 0.0, 1.0, f"e.g. {PAD_S}")
    check_range("vad_threshold", vad_threshold, 0.01, 0.99, "e.g. 0.5 (Silero's speech probability)")


class LiveStream(ChunkConsumer):
    """A live transcription (see module docstring); made by ``WhisperEngine.stream()``.

    ``feed(chunk)`` takes 16 kHz mono float samples (a 1-D numpy array, float64 converted; int16 arrays and int16
    little-endian PCM bytes too) and returns the events the passes it completed produced;
    ``finish()`` decodes what is left, commits it (see the module docstring for a last pass that
    loops) and returns the last events; ``events(chunks)``
    does both for an iterable of chunks. A chunk that is refused (wrong dtype or shape, NaN) raises
    ``AudioError`` and leaves the stream as it was. ``max_buffer_s``: see the module docstring. ``on_pass``: called with a ``PassRecord`` after
    each pass (tests decode it again; keep no reference to save memory). ``previous_pass_drafts``:
    draft each pass from the previous one (speed only). ``force_committed``: force the committed
    text still in the buffer as the pass's prefix (default; off: each pass decodes it again, as
    whisper_streaming does, drafted by the previous pass, and is decoded a second time with it
    forced only where it disagrees). ``endpointing`` (auto, vad, energy, off), ``silence_s``,
    ``pad_s``, ``vad_threshold``: the speech gate (module docstring); ``self.endpointing`` says
    which detector runs. ``totals``: counts and seconds summed over the decodings (``gated_s``:
    audio not decoded for want of speech; ``utterance_ends``: utterances the gate ended)."""

    def __init__(self, engine: WhisperEngine, language: str | None = None, task: str = "transcribe",
                 step_s: float = 1.0, *, max_buffer_s: float | None = None, previous_pass_drafts: bool = True,
                 force_committed: bool = True, endpointing: str = "auto", silence_s: float = SILENCE_S,
                 pad_s: float = PAD_S, vad_threshold: float = 0.5,
                 on_pass: Callable[[PassRecord], None] | None = None, sample_rate: int = SAMPLE_RATE,
                 **options) -> None:
        if isinstance(step_s, bool) or not isinstance(step_s, Real) or not MIN_STEP_S <= step_s <= MAX_STEP_S:
            raise OptionError(f"step_s must be a number of seconds in [{MIN_STEP_S}, {MAX_STEP_S}], got {step_s!r}",
                              where="step_s", hint="use e.g. 1.0 (a pass every second of new audio)")
        if max_buffer_s is None:
            max_buffer_s = max(MAX_BUFFER_S, 2 * step_s)
        if isinstance(max_buffer_s, bool) or not isinstance(max_buffer_s, Real) or \
                not 2 * step_s <= max_buffer_s <= WINDOW_SAMPLES / SAMPLE_RATE - step_s:
            raise OptionError(f"max_buffer_s must be between twice step_s and 30 s less step_s, got {max_buffer_s!r}",
                              where="max_buffer_s", hint="leave it out (15 s, or two steps where they are longer)")
        check_consumer_args("a live stream", "engine.stream", sample_rate, options, SET_BY_STREAM,
                            "the stream sets timestamps, prefix and draft hints itself; "
                            "word timestamps (and hallucination_silence_threshold, which needs them), clips and "
                            "chunk_length (a pass decodes one window of up to "
                            "30 s) are not supported live yet")
        check_gate_options(endpointing, silence_s, pad_s, vad_threshold)
        options.setdefault("audio_ctx", "auto")
        # Greedy passes: a pass that loops is unsure and commits nothing (the next pass, a second
        # later, decodes the buffer again), so a ladder would only spend the step's time on samples.
        options.setdefault("temperature", 0.0)
        opts = checked_options("engine.stream", SET_BY_STREAM, language=language, task=task, **options)  # all checked now
        language = engine.tokenizer.checked_language(language)  # a code this model knows
        task = engine.tokenizer.checked_task(task)  # said once here, not on every pass
        self.engine, self.language, self.task = engine, language, task
        self.previous_pass_drafts, self.force_committed, self.on_pass = previous_pass_drafts, force_committed, on_pass
        prompt = opts.initial_prompt
        self._initial = engine.tokenizer.encode(" " + prompt.strip()) if isinstance(prompt, str) else \
            list(prompt or ())
        self._options = {k: v for k, v in options.items() if k != "initial_prompt"}
        self._tb = engine.tokenizer.special.timestamp_begin
        self._eot = engine.tokenizer.special.eot
        self._step = round(step_s * SAMPLE_RATE)
        self._max_buffer = round(max_buffer_s * SAMPLE_RATE)
        self._gate = None if endpointing == "off" else SpeechGate(
            endpointing, round(pad_s * SAMPLE_RATE), round(max(pad_s, EMPTY_KEEP_S) * SAMPLE_RATE), vad_threshold)
        self.endpointing: str = self._gate.name if self._gate else "off"  # what runs: vad, energy or off
        self._silence = round(silence_s * SAMPLE_RATE)
        self._input = ChunkQueue()  # fed samples not yet in the buffer (less than a step)
        self._buffer = np.zeros(0, np.float32)  # the uncommitted audio a pass decodes
        self._offset = 0  # stream sample of the buffer's first sample
        self._context: deque[int] = deque(maxlen=CONTEXT_TOKENS)  # committed text tokens (the prompt)
        self._prefix: list[int] = []  # committed tokens of the segment still open in the buffer
        self._previous: list[int] | None = None  # the last pass's tokens, in the buffer's time
        self._tentative = ""
        self._last_end = 0.0  # where the last closed segment ended (times never go back)
        self._word_start: dict[int, bool] = {}
        self._finished = False
        self._final_pass_done = False
        self._undelivered: list[LiveEvent] = []
        self._looped = False  # a short encoder window made the decoder loop on this buffer
        self._unsure = False  # the last pass looped, or its mean token log-probability was below LOW_CONFIDENCE
        self._no_speech = False  # the last pass met Whisper's no-speech rule
        self._looped_pass = False  # the last pass looped or copied its prompt
        self._decoded_before = False  # a pass decoded words of this stream before the last one
        self.totals: dict = dict.fromkeys(("passes", "pass_s", "encoder_s", "decoder_s", "tokens", "decoder_calls",
                                           "verify_calls", "steps", "drafted", "accepted", "hint_drafted",
                                           "hint_accepted", "committed_tokens", "loops", "loops_cut", "prompt_copies",
                                           "word_cuts", "gated_s", "utterance_ends", "no_speech",
                                           "rest_passes"), 0)

    # -- input -----------------------------------------------------------------------------
    def feed(self, chunk) -> list[LiveEvent]:
        """Add audio; run one pass per completed step; return the events they produced."""
        if self._finished:
            raise SpecWhisperError("this live stream is finished: feed() after finish()", where="LiveStream.feed",
                                   hint="start a new stream with engine.stream() for more audio")
        self._input.add(chunk, where=f"LiveStream.feed (chunk at {self.time_s:.2f} s)")
        self._run_whole_steps()
        return self._deliver()

    def finish(self) -> list[LiveEvent]:
        """Decode what is left and commit it; the stream then takes no more audio. Interrupted, it
        is completed by calling it again (nothing it or an interrupted ``feed`` committed is lost)."""
        self._finished = True
        if not self._final_pass_done:
            self._run_whole_steps()  # what an interrupted feed left queued, a step a pass as feed runs it
            self._extend(self._input.take(self._input.pending))
            self._undelivered += self._pass(final=True)
            self._final_pass_done = True
        return self._deliver()

    def _run_whole_steps(self) -> None:
        """One pass per whole step queued; each pass's events are kept as it ends (``_deliver``)."""
        while self._input.pending >= self._step:
            self._extend(self._input.take(self._step))
            self._undelivered += self._pass()

    @property
    def buffer_s(self) -> float:
        """Seconds of audio the next pass decodes again (uncommitted, or in a segment still open)."""
        return (self._buffer.size + self._input.pending) / SAMPLE_RATE

    # -- passes ----------------------------------------------------------------------------
    def _extend(self, samples: np.ndarray) -> None:
        """Append samples to the buffer (and to what the speech gate has heard)."""
        self._buffer = np.concatenate([self._buffer, samples])
        if self._gate is not None:
            self._gate.push(samples)

    def _pass(self, final: bool = False) -> list[LiveEvent]:
        """A pass over the buffer; with a speech gate, over its speech only. A buffer with no
        speech (and no open segment) is not decoded: it is dropped but for the lead of what may
        come next. Non-speech before the first speech's lead is dropped too. Once the speech in the
        buffer is followed by ``silence_s`` of non-speech, the utterance is over: a last pass
        over the speech and its pad commits what it hears (as ``finish`` does) and ends the
        segment; the non-speech after it is never decoded (Whisper writes text into noise)."""
        gate = self._gate
        if gate is None:
            return self._decode_and_commit(final)
        start, end = self._offset, self._offset + self._buffer.size
        if not any(t < self._eot for t in self._prefix):  # no open text (a segment's start timestamp at most)
            first = gate.speech_start(start, end)
            if first is None:
                keep = 0 if final else min(self._buffer.size, gate.lead)
                self.totals["gated_s"] += (self._buffer.size - keep) / SAMPLE_RATE
                self._drop(self._buffer.size - keep)
                return self._tail_event("", self._time(self._offset))
            if first > start:  # non-speech before the speech: not decoded
                self.totals["gated_s"] += (first - start) / SAMPLE_RATE
                self._drop(first - start)
        speech_end = gate.speech_end(self._offset, end)
        if speech_end is None or speech_end >= end or not (final or gate.silence_after_speech(end) >= self._silence):
            return self._decode_and_commit(final)
        rest = self._buffer[speech_end - self._offset:]
        self._buffer = self._buffer[:speech_end - self._offset]
        try:
            events = self._decode_and_commit(final=True)  # the buffer is empty after it, at speech_end
        finally:  # interrupted while decoding, the buffer is as it was
            self._buffer = np.concatenate([self._buffer, rest])
        self.totals["utterance_ends"] += not final
        return events

    def _decode_and_commit(self, final: bool, rest_passes: int = REST_PASSES) -> list[LiveEvent]:
        """Decode the buffer and commit what this pass and the one before agree on (all of it on a
        last pass, unless it is doubtful: see the module docstring). ``rest_passes``: how many
        more last passes may follow where a last pass's text ends before speech does."""
        buffer, events, offset = self._buffer, [], self._offset
        if buffer.size == 0 or (not self._prefix and float(np.abs(buffer).max()) < SILENCE_PEAK):
            self._close_open(events)
            self._drop(buffer.size)  # silence: nothing to decode, nothing to keep
            return events + self._tail_event("", self._time(self._offset))
        current = self._decode(buffer)
        begin, close_all = len(self._prefix), final
        doubtful = self._looped_pass or (self._unsure and buffer.size < LAST_TAIL_S * SAMPLE_RATE)
        held_back, self._decoded_before = doubtful and self._decoded_before, True
        if final and not held_back:
            done = len(current)
        else:  # a doubtful last pass after other passes: only what a sure pass before said too
            done = agreed_length(current, self._previous, begin, self._tb, self._starts_word)
            if self._unsure and not final:
                done = begin
            if buffer.size + self._step > self._max_buffer and not any(self._closes(current, i)
                                                                       for i in range(begin, done)):
                # Long enough, and no committed segment ended: cut after the last committed word
                # (a long forced prefix makes Whisper go on with it: digit lists over a sentence);
                # nothing committed: at the last segment end this pass found, else after the pass's
                # last word (a pass cut short, by its cap or a loop, has not decoded the rest yet).
                if any(t < self._eot for t in current[:done]):
                    return self._cut_after_words(buffer, current, done, events)
                ends = [i for i in range(max(1, begin), len(current)) if self._closes(current, i)]
                if not ends:  # its last word may be cut off (a capped pass): it stays, with its audio
                    first = next((i for i in range(begin, len(current)) if current[i] < self._eot), len(current))
                    last = next((i for i in range(len(current) - 1, first, -1) if self._starts_word(current[i])), None)
                    if last is not None:
                        return self._cut_after_words(buffer, current, last, events)
                done, close_all = (ends[-1] + 1, False) if ends else (len(current), True)
        if final and self._no_speech:  # a last pass over what Whisper calls no speech commits nothing
            done = begin
            self.totals["no_speech"] += 1
        self._commit(current, done, events)
        if self._unsure and not final:
            self._previous = None  # two unsure passes must not agree: a hallucination repeats itself
        if close_all:
            if final and rest_passes > 0 and self._speech_after_text(offset):
                return self._rest_pass(buffer, offset, current[:done], events, rest_passes - 1)
            self._close_open(events)
            self._drop(self._buffer.size)
        elif not any(t < self._eot for t in current):  # no words heard: keep only the last moment
            self._drop(max(0, self._buffer.size - round(EMPTY_KEEP_S * SAMPLE_RATE)))
        tail = [] if self._previous is None else self._previous[len(self._prefix):]
        start = self._segment_start(self._previous or [], len(self._prefix))
        return events + self._tail_event(self._text(tail), start)

    def _speech_after_text(self, offset: int) -> bool:
        """Whether a last pass (that started with the buffer at ``offset``) ended its text while
        speech went on: its committed text closed a segment, so the buffer was trimmed at that
        segment's end (a pass that commits no words trims nothing, and ends the last passes), no
        committed text is still open, and the rest holds at least ``REST_SPEECH_S`` of speech
        (``early_end.speech_seconds_in``: Silero VAD, else frame energy). A second, as the offline
        path asks of what follows a window's last segment: more than the end of a word that a
        segment end can fall inside (0.76 s, see ``_trim_point``), which another pass would hear
        as a word again; less than the phrase tiny.en left out ("jazz in the living room.", 1.4 s)."""
        return (self._offset > offset and not self._open_text()
                and speech_seconds_in(self._buffer) >= REST_SPEECH_S)

    def _rest_pass(self, buffer: np.ndarray, offset: int, committed: list[int], events: list[LiveEvent],
                   rest_passes: int) -> list[LiveEvent]:
        """Another last pass where the last one (over ``buffer`` at ``offset``) ended its text
        before speech did: over the same audio, with all it committed forced and a segment
        starting where its text ended, so that the pass decodes only what follows, with the audio
        and words before it as context (tiny.en heard the 1.8 s rest alone as "heavy believing
        room.", and after the forced text " task in the living room.", as the pass before had).
        ``events`` are committed: they are delivered first, so that an interrupted pass cannot
        lose them. The pass before took this audio for none: nothing to agree with (a doubtful
        pass commits nothing), and no bound on the new pass's tokens."""
        self._undelivered += events
        if self._closes(committed, len(committed) - 1):  # a segment end, then nothing: the next starts there
            committed = committed + committed[-1:]
        self._buffer, self._offset = buffer, offset
        self._prefix, self._previous = committed, None
        self.totals["rest_passes"] += 1
        return self._decode_and_commit(final=True, rest_passes=rest_passes)

    def _cut_after_words(self, buffer: np.ndarray, current: list[int], done: int,
                         events: list[LiveEvent]) -> list[LiveEvent]:
        """Commit ``current[:done]``, end its segment where its last word ends and cut the buffer
        there, keeping the audio after it for the next passes."""
        cut = self._word_end(buffer, current[:done], current)
        self._commit(current, done, events, open_end=cut)
        self._close_open(events, cut)
        self._drop(cut)
        return events + self._tail_event("", self._time(self._offset))

    def _close_open(self, events: list[LiveEvent], end: int | None = None) -> None:
        """End the segment whose committed text is still open, ``end`` samples into the buffer
        (default: its end)."""
        if self._open_text():
            end = self._buffer.size if end is None else end
            events.append(self._event("commit", [], self._segment_start(self._prefix, len(self._prefix)),
                                      self._time(self._offset + end), True))

    def _word_end(self, buffer: np.ndarray, committed: list[int], heard: list[int]) -> int:
        """Samples into the buffer where the last word of ``committed`` (the first tokens of the
        pass ``heard``) ends, by the cross-attention alignment of word timestamps over all the pass
        heard, forced (one extra decoding, only when a full buffer has no segment end to cut at);
        the whole buffer where nothing is committed. Aligned alone, a committed "9," in 14 s of
        spoken digits ended at 14.3 s (nothing after it to take the rest of the audio), and the
        cut dropped the digits no pass had committed."""
        text = "".join(self._text(committed).split())
        if not text:
            return buffer.size
        t0 = time.perf_counter()
        context = list(self._context)[:max(0, len(self._context) - sum(t < self._eot for t in self._prefix))]
        window, _ = decode_pass(self.engine, buffer, **dict(
            self._options, language=self.language, task=self.task, timestamps="on",
            initial_prompt=tuple(self._initial + context), prefix=tuple(heard), max_new_tokens=1,
            word_timestamps=True, audio_ctx="full" if self._looped else self._options["audio_ctx"]))
        self.totals["word_cuts"] += 1
        self.totals["pass_s"] += time.perf_counter() - t0
        seen = ""
        for word in (w for segment in window.segments for w in segment.words or ()):
            seen += "".join(word.word.split())
            if len(seen) >= len(text):
                return min(buffer.size, max(0, round(word.end * SAMPLE_RATE)))
        return buffer.size

    def _decode(self, buffer: np.ndarray) -> list[int]:
        """Decode the buffer; returns the pass's tokens, the committed prefix first. With
        ``force_committed`` off the pass decodes the prefix again (drafted by the previous pass), and
        only where it then says something else is it decoded once more with the prefix forced."""
        prefix = self._prefix
        context = list(self._context)[:max(0, len(self._context) - sum(t < self._eot for t in prefix))]
        if not self.force_committed:
            tokens = self._run(buffer, [], context)
            if self._starts_with(tokens, prefix):
                return tokens
        return self._run(buffer, prefix, context)

    def _run(self, buffer: np.ndarray, prefix: list[int], context: list[int]) -> list[int]:
        """One decoding of the buffer with ``prefix`` forced.

        Whisper loops ("seven, seven, seven, ...") where speech is cut off at the end of a buffer,
        digit lists most of all: two passes would agree on the loop and commit it, and it would
        prompt every later pass. So a pass may emit only a few tokens more than the previous pass
        did (``LOOP_MARGIN`` plus what a step of speech holds), which keeps a loop cheap; a pass
        that stops there, or whose text compresses like a loop, keeps only what came before the
        repetition, and where its encoder window was short it is decoded again in a full window
        (as ``transcribe`` does), and so is the buffer's audio until it is trimmed."""
        seconds = buffer.size / SAMPLE_RATE
        hint = self._previous[len(prefix):] if self._previous else []
        previous = self._initial + context
        cap = int(max(LOOP_TOKENS_MIN, LOOP_TOKENS_PER_S * seconds)) + 1
        if self._previous is not None:  # no previous pass (the first, or one after an unsure pass): the
            # audio's bound alone (a cap of a step's worth cut such a pass short, and a last pass with it)
            cap = min(cap, len(hint) + round(LOOP_TOKENS_PER_S * self._step / SAMPLE_RATE) + LOOP_MARGIN)
        prompt = (1 + min(len(previous), MAX_POSITIONS // 2 - 1) if previous else 0) + 4 + len(prefix)
        options = dict(self._options, language=self.language, task=self.task, timestamps="on",
                       initial_prompt=tuple(previous), prefix=tuple(prefix) or None, scores=True,
                       draft_hint=tuple(hint) if self.previous_pass_drafts else (),
                       max_new_tokens=cap if prompt + cap <= MAX_POSITIONS else None)
        for audio_ctx in (self._options["audio_ctx"] if not self._looped else "full", "full"):
            t0 = time.perf_counter()
            options = dict(options, audio_ctx=audio_ctx)
            window, transcription = decode_pass(self.engine, buffer, **options)
            tokens = list(window.tokens) if window.numerics != "skipped" else list(prefix)
            self._account(window, transcription, buffer, options, time.perf_counter() - t0)
            new = tokens[len(prefix):]
            kept = cut_repetition(new) if len(new) >= cap else new
            looping = len(kept) < len(new) or compression_ratio(self._text(new)) > COMPRESSION_RATIO_THRESHOLD
            if not looping or transcription.run.ctx_frames == N_FRAMES:
                break
            self.totals["loops"] += 1
            self._looped = True  # the same audio would loop again: full windows until it is trimmed
        if looping:
            tokens = list(prefix) + cut_repetition(kept, min_copies=2)
        ends = [c for c in (creeping_loop(tokens), inner_loop(tokens, len(prefix))) if c is not None]
        creeping = min(ends) if ends else None
        if creeping is not None:
            tokens = tokens[:max(len(prefix), creeping)]
        text = [t for t in tokens[len(prefix):] if t < self._eot]
        copied = len(text) > SPEECH_TOKENS_PER_S * seconds and copies_prompt(text, [t for t in previous if t < self._eot])
        looped = looping or creeping is not None or copied
        self.totals["prompt_copies"] += copied  # the prompt stays: clearing it changed every later pass
        if looping or creeping is not None:
            self.totals["loops_cut"] += 1
            self._context.clear()  # a loop in the prompt makes the next passes loop (faster-whisper resets it too)
        # A pass that looped (cut or creeping) is unsure too: two looping passes agree on the loop's
        # first turns, and the trimmed buffer then loses the speech after it.
        self._looped_pass = looped
        self._unsure = looped or (window.avg_logprob is not None and window.avg_logprob < LOW_CONFIDENCE)
        self._no_speech = (window.no_speech_prob is not None and window.avg_logprob is not None
                           and window.no_speech_prob > NO_SPEECH_P and window.avg_logprob < NO_SPEECH_LOGPROB)
        if self.language is None and not self._unsure and seconds >= LANGUAGE_MIN_S \
                and any(t < self._eot for t in tokens):
            # detected once, on the first sure pass over enough audio: a first second's guess (a
            # hallucinated " Thank you.") fixed English for a Japanese stream; until then each pass detects
            self.language = transcription.language
        return tokens

    def _account(self, window: WindowResult, transcription, buffer: np.ndarray, options: dict,
                 seconds: float) -> None:
        s, totals = window.stats, self.totals
        hint_stats = s.get("by_drafter", {}).get("previous_pass", {})
        for key, value in (("passes", 1), ("pass_s", seconds), ("encoder_s", transcription.run.timings["encoder_s"]),
                           ("decoder_s", transcription.run.timings["decoder_s"]), ("tokens", s.get("tokens", 0)),
                           ("decoder_calls", s.get("decoder_calls", 0)), ("verify_calls", s.get("verify_calls", 0)),
                           ("steps", s.get("steps", 0)), ("drafted", s.get("drafted", 0)),
                           ("accepted", s.get("accepted", 0)), ("hint_drafted", hint_stats.get("drafted", 0)),
                           ("hint_accepted", hint_stats.get("accepted", 0))):
            totals[key] += value
        if self.on_pass is not None:
            self.on_pass(PassRecord(totals["passes"] - 1, self._time(self._offset), buffer, options,
                                    list(window.tokens), window.numerics, s, seconds))

    def _starts_with(self, tokens: list[int], prefix: list[int]) -> bool:
        """Whether a pass decoded the committed prefix again as it was (timestamps may move)."""
        tb = self._tb
        return len(tokens) >= len(prefix) and all(a == b or (a >= tb and b >= tb) for a, b in zip(tokens, prefix))

    def _commit(self, current: list[int], done: int, events: list[LiveEvent], open_end: int | None = None) -> None:
        """Commit ``current[len(prefix):done]``: events for it, the prompt context, and where a
        segment closed in it, the buffer trimmed at its end (the rest of the pass is rebased there).
        ``open_end``: where the open segment's text ends, in samples into the buffer, where known."""
        start = len(self._prefix)
        last_close, piece = None, []
        seg_start = self._segment_start(current, start)
        for i in range(start, done):
            t = current[i]
            if self._closes(current, i):
                trim = self._trim_point(current, i)
                events.append(self._event("commit", piece, seg_start, self._time_of(trim), True))
                last_close, piece = i, []
            elif t >= self._tb:
                seg_start = self._time_of(t)
            elif t < self._eot:
                piece.append(t)
        if piece:
            ahead = next((i for i in range(done, len(current)) if self._closes(current, i)), None)
            estimate = self._time(self._offset + open_end) if open_end is not None else \
                self._time_of(current[ahead]) if ahead is not None else self._time(self._offset + self._buffer.size)
            events.append(self._event("commit", piece, seg_start, estimate, False))
        committed = [t for t in current[start:done] if t < self._eot]
        self._context.extend(committed)
        self.totals["committed_tokens"] += len(committed)
        if last_close is None:
            self._prefix, self._previous = current[:done], current
            return
        shift = trim - self._tb  # the last closed segment's
        rest = [max(t - shift, self._tb) if t >= self._tb else t for t in current[last_close + 1:]]
        self._drop(min(shift * SAMPLES_PER_TIMESTAMP, self._buffer.size))
        self._prefix, self._previous = rest[:done - last_close - 1], rest

    def _trim_point(self, current: list[int], close: int) -> int:
        """The timestamp to trim the buffer at for the segment end ``current[close]``: the later of
        this pass's and the previous pass's (which agreed on it), no later than where this pass's
        next segment starts. A segment end is a guess that moves as audio arrives and can fall
        inside the last words (7.00 s against 7.76 s the pass before: trimming at 7.00 cut
        "his gospel" in two, and the next passes heard it again); trimming early loses words,
        trimming a little late only shortens the silence before the next ones."""
        end, previous = current[close], self._previous
        if previous is not None and close < len(previous) and self._starts_with(previous, current[:close + 1]):
            end = max(end, previous[close])  # the same segment end in both (not a pass that said otherwise)
        if close + 1 < len(current) and current[close + 1] >= self._tb:
            end = min(end, current[close + 1])
        return end

    def _drop(self, n: int) -> None:
        """Cut ``n`` samples off the front of the buffer; the passes' tokens no longer fit it."""
        self._offset += n
        self._buffer = self._buffer[n:]
        if self._gate is not None:
            self._gate.forget_before(self._offset)
        self._prefix, self._previous = [], None
        self._looped = self._looped and n == 0

    # -- helpers ---------------------------------------------------------------------------
    def _open_text(self) -> bool:
        """Whether the committed prefix ends in text of a segment still open (after its last
        segment end: a rest pass forces segments it closed before, see ``_rest_pass``)."""
        prefix = self._prefix
        last = next((i for i in range(len(prefix) - 1, 0, -1) if self._closes(prefix, i)), 0)
        return any(t < self._eot for t in prefix[last:])

    def _closes(self, tokens: list[int], i: int) -> bool:
        """Whether ``tokens[i]`` ends a segment (a timestamp right after text)."""
        return i > 0 and tokens[i] >= self._tb and tokens[i - 1] < self._eot

    def _segment_start(self, tokens: list[int], i: int) -> float:
        """Stream time where the segment holding position ``i`` of a pass started."""
        for j in range(min(i, len(tokens) - 1), -1, -1):
            if tokens[j] >= self._tb and not self._closes(tokens, j):
                return max(self._time_of(tokens[j]), self._last_end)
        return max(self._time(self._offset), self._last_end)

    def _starts_word(self, token: int) -> bool:
        """Whether ``token`` cannot continue the word before it (space, punctuation, timestamp, a
        character of a script written without spaces)."""
        known = self._word_start.get(token)
        if known is None:
            text = self.engine.tokenizer.decode([token]) if token < self._eot else " "
            first = text[:1]  # a piece of a character or a combining mark (a Thai vowel) continues one
            whole = bool(first) and first != "\ufffd" and not unicodedata.category(first).startswith("M")
            known = whole and (first.isspace() or unspaced_script(first) or not (first.isalnum() or first in "'’-"))
            self._word_start[token] = known
        return known

    def _time(self, sample: int) -> float:
        return sample / SAMPLE_RATE

    def _time_of(self, timestamp: int) -> float:
        """Stream time of a timestamp token of a pass over the buffer (a short encoder window's
        padding lets the model place a last timestamp after the audio: it ends with the buffer)."""
        return self._time(self._offset + min(self._buffer.size, (timestamp - self._tb) * SAMPLES_PER_TIMESTAMP))

    def _text(self, tokens: list[int]) -> str:
        return self.engine.tokenizer.decode([t for t in tokens if t < self._eot])

    def _event(self, kind: str, tokens: list[int], start: float, end: float, segment_end: bool) -> LiveEvent:
        start = max(start, self._last_end)
        end = max(end, start)
        if segment_end:
            self._last_end = end
        return LiveEvent(kind, self._text(tokens), start, end, segment_end, tuple(tokens))

    def _tail_event(self, text: str, start: float) -> list[LiveEvent]:
        if text == self._tentative:
            return []
        self._tentative = text
        end = self._time(self._offset + self._buffer.size)
        return [LiveEvent("tentative", text, max(start, self._last_end), max(end, start, self._last_end))]
