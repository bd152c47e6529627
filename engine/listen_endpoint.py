"""Endpointing for command mode (``listen``): which frames are speech, and where an utterance ends.

A command recogniser decodes each utterance once, when it is over, so the one question asked of
the audio is "has the speaker stopped?". Frames of ``FRAME`` samples (32 ms, Silero VAD's step)
are classed as speech by a detector; an utterance starts at a speech frame and ends after
``silence`` of non-speech (or at ``max_length``, cut hard). Two detectors:

* ``vad``: Silero VAD (the ``[vad]`` extra), frame by frame with its state carried, with
  faster-whisper's hysteresis (speech from ``threshold``, silence below ``threshold - 0.15``).
  Frames of digital silence (the engine's ``SILENCE_PEAK``) skip the model after the first
  ``ZERO_FRAMES_HEARD`` of them (a pause it hears as any pause), its state kept: hours of zeros
  cost nothing. (Started afresh after every zero frame instead, it missed short words after a
  pause: 21 of longform.flac's 112 spoken digits, each after 0.5 s of zeros, against 3);
* ``energy``: frame level against a noise floor that follows quiet frames at once and louder
  ones slowly (a fan that starts stops being speech within seconds), or against a fixed level.
  No dependency; fooled by loud noise, where VAD is not.

Everything is decided per frame of the stream's clock, so the same audio gives the same
utterances however it was chunked. Outside an utterance only ``pad`` of audio is kept (the
pre-roll); inside one at most ``max_length`` plus the pads: memory is bounded whatever is fed.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from .audio import SAMPLE_RATE
from .early_end import SILENCE_PEAK
from .errors import OptionError, SpecWhisperError
from .vad import FRAME

ENDPOINTINGS = ("auto", "vad", "energy")
FLOOR_START_DB = -60.0  # the noise floor assumed before any quiet frame was heard
FLOOR_MIN_DB = -90.0
FLOOR_RISE = 0.002  # per frame: the floor follows louder frames with a time constant of ~16 s
MARGIN_DB = 15.0  # speech is this much louder than the floor ...
MIN_SPEECH_DB = -50.0  # ... and never quieter than this
ZERO_FRAMES_HEARD = 31  # about a second of digital silence goes through the VAD model (see module docstring)
HYSTERESIS_DB = 6.0  # once speech, a frame stays speech down to this much under the start level


class SileroDetector:
    """Silero VAD over consecutive frames (see module docstring)."""

    name = "vad"

    def __init__(self, threshold: float = 0.5) -> None:
        from .vad import VadStream, get_vad_model

        self.threshold, self.neg_threshold = threshold, max(threshold - 0.15, 0.01)
        self._vad = VadStream(get_vad_model())
        self._active = False
        self._zeros = 0  # digital silence frames in a row

    def __call__(self, frame: np.ndarray) -> bool:
        if float(np.abs(frame).max()) < SILENCE_PEAK:
            self._zeros += 1
            if self._zeros > ZERO_FRAMES_HEARD:
                self._active = False
                return False
        else:
            self._zeros = 0
        p = self._vad(frame)
        if p >= self.threshold:
            self._active = True
        elif p < self.neg_threshold:
            self._active = False
        return self._active


class EnergyDetector:
    """Frame energy against an adaptive noise floor, or against ``threshold_db`` (dBFS) where given."""

    name = "energy"

    def __init__(self, threshold_db: float | None = None) -> None:
        self.threshold_db = threshold_db
        self.floor_db = FLOOR_START_DB
        self._active = False

    def __call__(self, frame: np.ndarray) -> bool:
        level = 10.0 * math.log10(float(np.dot(frame, frame)) / frame.size + 1e-12)
        start = self.threshold_db if self.threshold_db is not None else max(self.floor_db + MARGIN_DB,
                                                                          MIN_SPEECH_DB)
        if level >= start:
            self._active = True
        elif level < start - HYSTERESIS_DB:
            self._active = False
        if level < self.floor_db:
            self.floor_db = max(level, FLOOR_MIN_DB)
        else:
            self.floor_db += FLOOR_RISE * (level - self.floor_db)
        return self._active


def make_detector(endpointing: str, vad_threshold: float, energy_threshold_db: float | None):
    """The detector ``endpointing`` names; ``auto``: Silero VAD where the ``[vad]`` extra is
    installed, else energy."""
    if endpointing not in ENDPOINTINGS:
        raise OptionError(f"unknown endpointing {endpointing!r}", where="endpointing",
                               hint="use auto (VAD where installed, else energy), vad or energy")
    if endpointing == "energy":
        return EnergyDetector(energy_threshold_db)
    try:
        return SileroDetector(vad_threshold)
    except SpecWhisperError as exc:
        if endpointing == "auto":
            return EnergyDetector(energy_threshold_db)
        raise SpecWhisperError(f"VAD endpointing is unavailable: {exc.what}",
                               where="endpointing='vad' (listen --vad, stream --endpointing vad)",
                               hint="pip install 'specwhisper[vad]', or use energy endpointing (endpointing='energy': "
                                    "listen --energy, stream --endpointing energy)") from None


@dataclass
class Utterance:
    """One stretch of speech, with what the decoder gets: ``audio`` starts at stream sample
    ``audio_start``; ``speech_start``/``speech_end`` bound the speech frames; ``decided`` is the
    sample where the end was known (``speech_end`` plus the silence waited); ``reason``:
    ``silence``, ``max_length``, ``finish``, or ``complete`` (ended early: its text is a whole
    command by the token map)."""

    audio: np.ndarray
    audio_start: int
    speech_start: int
    speech_end: int
    decided: int
    reason: str

    @property
    def audio_end(self) -> int:
        return self.audio_start + self.audio.size


class Endpointer:
    """Frames and their speech flags in, finished utterances out (see module docstring). Lengths
    are in frames: ``silence`` ends an utterance, ``max_length`` cuts one, an utterance with fewer
    than ``min_speech`` speech frames is dropped (a click, a cough), ``pad`` frames of audio are
    kept each side of the speech (Whisper hears a word's onset and its decay)."""

    def __init__(self, silence: int, max_length: int, min_speech: int, pad: int) -> None:
        self.silence, self.max_length, self.min_speech, self.pad = silence, max_length, min_speech, pad
        self.position = 0  # stream frame of the next frame pushed
        self.dropped = 0  # utterances with too little speech
        self._idle: deque[np.ndarray] = deque(maxlen=pad)  # the pre-roll, while no one speaks
        self._frames: list[np.ndarray] = []  # the utterance under way: pre-roll, speech, silence so far
        self._first = 0  # stream frame of _frames[0]
        self._speech_start = self._last_speech = 0  # stream frames
        self._speech_frames = 0

    @property
    def in_speech(self) -> bool:
        return bool(self._frames)

    @property
    def buffered(self) -> int:
        """Samples held: the pre-roll, or the utterance under way."""
        return sum(f.size for f in self._frames) + sum(f.size for f in self._idle)

    def push(self, frame: np.ndarray, speech: bool) -> Utterance | None:
        """The next frame and whether it is speech; returns the utterance it ended, if any."""
        index = self.position
        self.position += 1
        frame = frame.copy()  # not a view: a view would keep the whole block it was cut from alive
        if not self._frames:
            if not speech:
                self._idle.append(frame)
                return None
            self._frames, self._first = [*self._idle, frame], index - len(self._idle)
            self._idle.clear()
            self._speech_start, self._speech_frames = index, 0
        else:
            self._frames.append(frame)
        if speech:
            self._last_speech = index
            self._speech_frames += 1
        if index - self._last_speech >= self.silence:
            return self._end("silence", index + 1)
        if index + 1 - self._speech_start >= self.max_length:
            return self._end("max_length", index + 1)
        return None

    def flush(self, tail: np.ndarray) -> Utterance | None:
        """The stream ended (``tail``: its last samples, less than a frame): the utterance under
        way, if any, with the tail."""
        if not self._frames:
            return None
        return self._end("finish", self.position, tail)

    def pending(self, after: int | None = None) -> Utterance | None:
        """The utterance that ends here if the silence under way lasts: its audio (the speech and
        ``after`` frames after it, ``pad`` by default) is complete once that many silent frames
        followed the last speech frame, so it can be decoded while the rest of the silence comes
        in. None before that, outside an utterance, or with too little speech. ``decided`` is
        where it became complete."""
        after = self.pad if after is None else after
        if not self._frames or self._speech_frames < self.min_speech:
            return None
        if self.silent_frames() < after:
            return None
        return self._utterance(self._frames, self._first, "silence", self.position, after=after)

    def silent_frames(self) -> int:
        """Frames since the last speech frame of the utterance under way (0 outside one)."""
        return self.position - (self._last_speech + 1) if self._frames else 0

    def cut(self, after: int) -> Utterance | None:
        """End the utterance under way now, with ``after`` frames of audio after its speech
        (``reason`` "complete": its text was judged a whole command); what followed becomes
        the pre-roll of the next one."""
        if not self._frames or self._speech_frames < self.min_speech:
            return None
        frames, first = self._frames, self._first
        self._frames = []
        end = self._last_speech + 1 + after
        if self.pad:
            self._idle.extend(frames[end - first:][-self.pad:])
        return self._utterance(frames, first, "complete", self.position, after=after)

    def _end(self, reason: str, decided: int, tail: np.ndarray | None = None) -> Utterance | None:
        frames, first = self._frames, self._first
        self._frames = []
        if self._speech_frames < self.min_speech:
            self.dropped += 1
            if reason == "silence" and self.pad:
                self._idle.extend(frames[-self.pad:])
            return None
        end = self._last_speech + 1 + self.pad  # the frame after the last one decoded
        if reason == "silence" and self.pad:
            self._idle.extend(frames[end - first:][-self.pad:])  # the pre-roll of what comes next
        return self._utterance(frames, first, reason, decided, tail)

    def _utterance(self, frames: list[np.ndarray], first: int, reason: str, decided: int,
                   tail: np.ndarray | None = None, after: int | None = None) -> Utterance:
        end = self._last_speech + 1 + (self.pad if after is None else after)  # the frame after the last one decoded
        kept = frames[:end - first]
        if end >= decided and tail is not None and tail.size:
            kept = [*kept, tail]  # the stream ended within the pad: its last samples too
        return Utterance(np.concatenate(kept), first * FRAME, self._speech_start * FRAME,
                         (self._last_speech + 1) * FRAME, decided * FRAME + (0 if tail is None else tail.size), reason)


def frames_of(seconds: float) -> int:
    """Frames that hold at least ``seconds`` of audio."""
    return math.ceil(round(seconds * SAMPLE_RATE) / FRAME)
