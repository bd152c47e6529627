"""Command mode: audio chunks in, one final result per utterance out (``engine.listen()``).

A voice command is short and wanted whole: there is no text to show while it is spoken, and
what matters is how soon after the speaker stops the text is there. So, unlike a live stream
(``live``), nothing is decoded while someone speaks: an endpointer (``listen_endpoint``: Silero
VAD where the ``[vad]`` extra is installed, frame energy otherwise) finds where an utterance ends
(``silence_s`` of silence after speech, or ``max_utterance_s``), and the utterance is decoded
**once**, by ``engine.transcribe``, so everything the engine does for one call applies: the token
map and what ``learn=True`` learned draft it, the policy picks its numerics, ``audio_ctx="auto"``
(the default here) fits the encoder to the short clip, and the token map's language is used where
none is given (detection on a 2 s accented command is a guess). Speculation keeps it lossless:
the text is ``transcribe``'s on the same audio with speculation off in the same numerics.

Decoding early: once ``pad_s`` of silence followed the speech, the audio the utterance would be
decoded with is complete, so at the end of the feed that completes it the utterance is decoded
right away, while the rest of the silence comes in. If the silence lasts, that result is the
utterance's (the same audio, so the same text as decoding it then); if speech resumes first, it
is dropped and the longer utterance decoded when it ends. With ``learn=True`` a dropped decoding
has taught the map its partial command (drafts only: speed, never text).

Ending on a whole command: with a token map (or ``learn=True``), an utterance is also decoded
once ``complete_s`` of silence followed its speech, and if the map says the domain's commands end
the way its text ends (``tokenmap.ending``: end-of-text followed its last words in at least
``COMPLETE_P`` of the map's transcripts) it ends there, without waiting for ``silence_s``. Text
that stops where commands go on ("Set the thermostat to") waits for the long silence as before.
This moves where utterances end, never what a decoding says: the text is still ``transcribe``'s on
the utterance's audio. Decided frame by frame on the stream's clock, like the endpointer.

Times are in the stream's clock (seconds of audio fed). ``latency_s`` is what a speaker waits when
audio arrives in real time: from the end of the speech, the later of the silence the endpointer
waited for (stream time) and the moment the decoding was done (decoded early: the pad, then the
decoding's wall time, while the silence went on; else: the silence, then the wall time from the
feed that completed it to the result).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from numbers import Real

from .audio import SAMPLE_RATE
from .errors import OptionError, SpecWhisperError
from .listen_endpoint import FRAME, Endpointer, Utterance, frames_of, make_detector
from .live_input import ChunkConsumer, ChunkQueue, check_consumer_args
from .results import Result
from .transcribe_options import checked_options
from .transcriber import WhisperEngine

MAX_UTTERANCE_S = 28.0  # with the pads, an utterance fits one 30 s window
COMPLETE_S = None  # off by default: see benchmarks/RESULTS_live.md (ends a third of the commands early, no median gain)
COMPLETE_P = 0.9  # end-of-text followed the last words this often: 0.5-0.7 split "..., please" on the tuning halves
SET_BY_LISTENER = ("clip_timestamps", "progress")


@dataclass(frozen=True)
class CommandResult:
    """One utterance's final text. ``start_s``/``end_s``: its speech in the stream's clock;
    ``audio_start_s``/``audio_end_s``: the audio decoded (the speech and up to ``pad_s`` each
    side); ``reason``: what ended it (``silence``, ``max_length``, ``finish``); ``latency_s``:
    speech end to result (module docstring), ``decode_s`` of which the decoding; ``stats``: the
    decoding's tokens, decoder calls, drafts and acceptance, numerics, encoder window; ``result``:
    the engine's whole ``Result``."""

    text: str
    start_s: float
    end_s: float
    audio_start_s: float
    audio_end_s: float
    reason: str
    language: str
    language_source: str
    latency_s: float
    decode_s: float
    stats: dict
    result: Result = field(repr=False, compare=False)
    kind: str = "command"

    def to_dict(self) -> dict:
        return {"type": self.kind, "text": self.text, "start_s": round(self.start_s, 3),
                "end_s": round(self.end_s, 3), "reason": self.reason, "language": self.language,
                "language_source": self.language_source, "latency_s": round(self.latency_s, 4),
                "decode_s": round(self.decode_s, 4), **self.stats}


class CommandListener(ChunkConsumer):
    """Command mode (see module docstring); made by ``WhisperEngine.listen()``.

    ``feed(chunk)`` takes 16 kHz mono float samples (a 1-D numpy array, float64 converted; int16 arrays and int16
    little-endian PCM bytes too) and returns the results of the utterances it completed;
    ``finish()`` decodes the utterance under way, if any; ``events(chunks)`` does both for an
    iterable of chunks. A refused chunk raises ``AudioError`` and leaves the listener as it was.

    ``endpointing``: ``auto`` (Silero VAD where the ``[vad]`` extra is installed, else energy),
    ``vad`` or ``energy``; ``self.endpointing`` says which runs. ``silence_s``: silence that ends
    an utterance (0.6 s: pauses inside a command are shorter, and every 0.1 s more is 0.1 s more
    latency); ``max_utterance_s``: an utterance is cut here; ``min_speech_s``: shorter speech is
    dropped undecoded; ``pad_s``: audio decoded each side of the speech; ``vad_threshold``: Silero
    speech probability; ``energy_threshold_db``: a fixed energy level (dBFS) instead of the
    adaptive one; ``complete_s``: silence that ends an utterance whose text the token map calls a
    whole command (None: off; it needs a token map or ``learn``), ``complete_p``: how often
    the map's commands must have ended after those words (``COMPLETE_P``). ``options``: those of
    ``transcribe`` (numerics, speculation, ...).
    ``totals``: utterances, dropped ones, and the decodings' counts and seconds summed."""

    def __init__(self, engine: WhisperEngine, language: str | None = None, task: str = "transcribe", *,
                 endpointing: str = "auto", silence_s: float = 0.6, max_utterance_s: float = 15.0,
                 min_speech_s: float = 0.15, pad_s: float = 0.3, vad_threshold: float = 0.5,
                 energy_threshold_db: float | None = None, complete_s: float | None = COMPLETE_S,
                 complete_p: float = COMPLETE_P, sample_rate: int = SAMPLE_RATE, **options) -> None:
        check_listener_options(silence_s, max_utterance_s, min_speech_s, pad_s, vad_threshold, energy_threshold_db,
                               complete_s, complete_p)
        check_consumer_args("a listener", "engine.listen", sample_rate, options, SET_BY_LISTENER,
                            "the listener decides what audio each decoding gets")
        options.setdefault("audio_ctx", "auto")
        checked_options("engine.listen", SET_BY_LISTENER, language=language, task=task, **options)  # all checked now
        language = engine.tokenizer.checked_language(language)  # a code this model knows
        task = engine.tokenizer.checked_task(task)  # said once here, not on every utterance
        self.engine, self.language, self.task = engine, language, task
        self._options = options
        self.detector = make_detector(endpointing, vad_threshold, energy_threshold_db)
        self.endpointing: str = self.detector.name
        self.silence_s = silence_s
        self._silence = frames_of(silence_s) * FRAME  # samples of silence that end an utterance
        self._endpointer = Endpointer(frames_of(silence_s), frames_of(max_utterance_s), frames_of(min_speech_s),
                                      frames_of(pad_s))
        if complete_s is not None and engine.tokenmap_drafter is None:
            raise OptionError("complete_s needs a token map to tell whole commands", where="complete_s",
                              hint="make the engine with tokenmap=FILE (or learn=True), or leave complete_s out")
        ends = engine.tokenmap_drafter if complete_s is not None else None
        self._ends = ends  # what says whether a text is a whole command (None: wait for the silence)
        self._complete = frames_of(complete_s) if ends is not None else None
        self._complete_p = complete_p
        self.complete_s = complete_s if ends is not None else None
        self._input = ChunkQueue()
        # endpointed and not yet decoded, or ended on a whole command (decoded already), in order
        self._ready: deque[tuple[Utterance, float] | CommandResult] = deque()
        self._early: tuple[Utterance, Result, float] | None = None  # decoded before its end was known
        self._finished = False
        self._undelivered: list[CommandResult] = []
        self.totals: dict = dict.fromkeys(("utterances", "dropped", "decode_s", "encoder_s", "decoder_s", "tokens",
                                           "decoder_calls", "drafted", "accepted", "early_used", "early_wasted",
                                           "complete_tried", "complete_ended"), 0)

    # -- input -----------------------------------------------------------------------------
    def feed(self, chunk) -> list[CommandResult]:
        """Add audio; returns the results of the utterances it completed (usually none)."""
        if self._finished:
            raise SpecWhisperError("this listener is finished: feed() after finish()", where="CommandListener.feed",
                                   hint="start a new one with engine.listen() for more audio")
        fed_at = time.perf_counter()
        self._input.add(chunk, where=f"CommandListener.feed (chunk at {self.time_s:.2f} s)")
        whole = self._input.pending // FRAME * FRAME
        if whole:
            block_end = (self._endpointer.position + whole // FRAME) * FRAME  # stream sample the feed ends at
            for _ in range(whole // FRAME):  # a frame at a time off the queue: an interrupt keeps the rest
                frame = self._input.take(FRAME)
                utterance = self._endpointer.push(frame, self.detector(frame))
                if utterance is not None:
                    self._ready.append((utterance, fed_at))
                elif self._complete is not None and self._endpointer.silent_frames() == self._complete:
                    self._end_if_complete(block_end)
        self.totals["dropped"] = self._endpointer.dropped
        self._decode_ready()
        self._decode_early()
        return self._deliver()

    def finish(self) -> list[CommandResult]:
        """Decode the utterance under way, if any; the listener then takes no more audio.
        Interrupted, it is completed by calling it again."""
        if not self._finished:
            self._finished = True
            utterance = self._endpointer.flush(self._input.take(self._input.pending))
            self.totals["dropped"] = self._endpointer.dropped
            if utterance is not None:
                self._ready.append((utterance, time.perf_counter()))
        self._decode_ready()
        return self._deliver()

    @property
    def buffered_s(self) -> float:
        """Seconds of audio held: the pre-roll, or the utterance under way."""
        return (self._endpointer.buffered + self._input.pending) / SAMPLE_RATE

    @property
    def in_speech(self) -> bool:
        """Whether an utterance is under way."""
        return self._endpointer.in_speech

    # -- decoding --------------------------------------------------------------------------
    def _decode_ready(self) -> None:
        """Decode the utterances endpointed so far, in order, into what the call returns
        (``_deliver``: with any an interrupted call decoded and did not return). A decoding that
        raises leaves the utterances after it queued (the whole block was endpointed first), for
        the next feed or finish: an error costs one command, never the audio after it; an
        interrupt (Ctrl-C) costs none, the utterance it stopped stays queued."""
        while self._ready:
            item = self._ready[0]
            try:
                decoded = [item] if isinstance(item, CommandResult) else self._decode(*item)
            except Exception:
                self._ready.popleft()
                raise
            self._ready.popleft()
            self._undelivered += decoded

    def _end_if_complete(self, block_end: int) -> None:
        """``complete_s`` of silence followed the speech: decode the utterance so far, and end it
        here if its text is a whole command (module docstring). Its latency: from the end of the
        speech to the end of the feed that brought this frame (when the audio was there in real
        time), plus the decoding."""
        pending = self._endpointer.pending(after=self._complete)
        if pending is None:
            return
        self.totals["complete_tried"] += 1
        t0 = time.perf_counter()
        try:
            result = self.engine.transcribe(pending.audio, language=self.language, task=self.task, **self._options)
        except SpecWhisperError:  # decoded again when the utterance ends: its error is raised there
            return
        decode_s = time.perf_counter() - t0
        p = self._ends.end_probability(result.tokens)
        if p is None or p < self._complete_p:
            return
        utterance = self._endpointer.cut(self._complete)
        self._early = None
        self.totals["complete_ended"] += 1
        latency = (block_end - utterance.speech_end) / SAMPLE_RATE + decode_s
        self._ready.append(self._command(utterance, result, decode_s, latency))

    def _decode_early(self) -> None:
        """Decode the utterance whose silence is under way, if its audio is complete (module
        docstring); drop an early decoding that speech resumed after."""
        pending = self._endpointer.pending()
        if self._early is not None and not _same_audio(self._early[0], pending):
            self._early = None
            self.totals["early_wasted"] += 1
        if pending is None or self._early is not None or pending.decided - pending.speech_end >= self._silence:
            return
        t0 = time.perf_counter()
        try:
            result = self.engine.transcribe(pending.audio, language=self.language, task=self.task, **self._options)
        except SpecWhisperError:  # decoded again when the utterance ends: its error is raised there
            return
        self._early = (pending, result, time.perf_counter() - t0)

    def _decode(self, utterance: Utterance, fed_at: float) -> list[CommandResult]:
        early, self._early = self._early, None
        waited = (utterance.decided - utterance.speech_end) / SAMPLE_RATE
        if early is not None and _same_audio(early[0], utterance):
            _, result, decode_s = early
            latency = max(waited, (early[0].decided - utterance.speech_end) / SAMPLE_RATE + decode_s)
            self.totals["early_used"] += 1
            return [self._command(utterance, result, decode_s, latency)]
        if early is not None:
            self.totals["early_wasted"] += 1
        t0 = time.perf_counter()
        result = self.engine.transcribe(utterance.audio, language=self.language, task=self.task, **self._options)
        done = time.perf_counter()
        return [self._command(utterance, result, done - t0, waited + done - fed_at)]

    def _command(self, utterance: Utterance, result: Result, decode_s: float, latency_s: float) -> CommandResult:
        s, t = result.stats, result.timings
        stats = {"tokens": s["tokens"], "decoder_calls": s["decoder_calls"], "verify_calls": s["verify_calls"],
                 "drafted": s["drafted"], "accepted": s["accepted"], "acceptance_rate": s["acceptance_rate"],
                 "numerics": result.numerics, "audio_ctx": result.audio_ctx,
                 "encoder_s": round(t.get("encoder_s", 0.0), 4), "decoder_s": round(t.get("decoder_s", 0.0), 4)}
        totals = self.totals
        totals["utterances"] += 1
        totals["decode_s"] += decode_s
        for key in ("encoder_s", "decoder_s"):
            totals[key] += t.get(key, 0.0)
        for key in ("tokens", "decoder_calls", "drafted", "accepted"):
            totals[key] += s[key]
        return CommandResult(result.text, utterance.speech_start / SAMPLE_RATE, utterance.speech_end / SAMPLE_RATE,
                             utterance.audio_start / SAMPLE_RATE, utterance.audio_end / SAMPLE_RATE,
                             utterance.reason, result.language, result.language_source, latency_s, decode_s, stats,
                             result)


def _same_audio(a: Utterance | None, b: Utterance | None) -> bool:
    """Whether two cuts of an utterance decode the same samples (no speech came in between)."""
    return (a is not None and b is not None and a.audio_start == b.audio_start and a.speech_end == b.speech_end
            and a.audio.size == b.audio.size)


def check_listener_options(silence_s: float = 0.6, max_utterance_s: float = 15.0, min_speech_s: float = 0.15,
                           pad_s: float = 0.3, vad_threshold: float = 0.5,
                           energy_threshold_db: float | None = None, complete_s: float | None = None,
                           complete_p: float = COMPLETE_P) -> None:
    """Raise ``OptionError`` for an endpointing option out of range (the CLI asks before loading a model)."""
    if complete_s is not None:
        check_range("complete_s", complete_s, 0.03, silence_s,
                     f"a silence shorter than silence_s ({silence_s}), e.g. 0.1, or None (off)",
                     cli=("--complete-ms", 1000))
    check_range("complete_p", complete_p, 0.0, 1.0, f"e.g. {COMPLETE_P}")
    check_range("silence_s", silence_s, 0.1, 5.0, "e.g. 0.6 (seconds of silence that end a command)")
    check_range("max_utterance_s", max_utterance_s, 1.0, MAX_UTTERANCE_S, "e.g. 15")
    check_range("min_speech_s", min_speech_s, 0.0, max_utterance_s, "e.g. 0.15")
    check_range("pad_s", pad_s, 0.0, 1.0, "e.g. 0.3")
    check_range("vad_threshold", vad_threshold, 0.01, 0.99, "e.g. 0.5 (Silero's speech probability)")
    if energy_threshold_db is not None:
        check_range("energy_threshold_db", energy_threshold_db, -100.0, 0.0, "e.g. -40 (dBFS), or None")


def check_range(name: str, value, low: float, high: float, example: str,
                 cli: tuple[str, float] | None = None) -> None:
    """``cli``: the command line's flag for the option and its scale (``--complete-ms``: 1000 a
    second), named beside the keyword so that either user reads their own option."""
    if isinstance(value, bool) or not isinstance(value, Real) or not low <= value <= high:
        where = f"{name} ({cli[0]}: {low * cli[1]:g} to {high * cli[1]:g})" if cli else name
        raise OptionError(f"{name} must be a number in [{low}, {high}], got {value!r}", where=where,
                          hint=f"use {example}")
