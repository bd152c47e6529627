"""Where a live stream has speech: the frames a detector heard as speech, on the stream's clock (``live``).

Whisper writes text for any audio it is given: on room noise after the last sentence base wrote
" I am very proud of you.", tiny.en " Thank you.", and a stream that decodes every second of a
quiet room spends its CPU on such passes. whisper_streaming pairs its LocalAgreement policy with
a voice-activity controller for the same reason. ``SpeechGate`` classes each ``FRAME`` (32 ms)
of the stream with ``listen``'s detectors (Silero VAD where the ``[vad]`` extra is installed,
frame energy otherwise) and keeps the speech runs still inside the stream's buffer, so that a
pass can ask: is there speech in this buffer, where does it start, and has it ended? Decided
frame by frame as samples arrive, so the answers do not depend on how the audio was chunked.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .listen_endpoint import ENDPOINTINGS, FRAME, make_detector

GATES = (*ENDPOINTINGS, "off")  # listen's detectors, or none


class SpeechGate:
    """Speech runs of a stream, ``lead`` samples added before each and ``pad`` after (a detector
    hears a word's onset and its soft ending late or not at all: faster-whisper pads VAD chunks
    the same way). The lead is the longer: Silero heard "Nor is ..." 0.56 s after it began, and
    Whisper takes non-speech before speech in its stride."""

    def __init__(self, gate: str, pad: int, lead: int | None = None, vad_threshold: float = 0.5) -> None:
        self._detect = make_detector(gate, vad_threshold, None)
        self.name = self._detect.name
        self.pad = pad
        self.lead = pad if lead is None else lead
        self._partial = np.zeros(0, np.float32)  # samples of a frame not yet complete
        self._heard = 0  # stream samples classed so far (whole frames)
        self._runs: deque[list[int]] = deque()  # [start, end) in stream samples, unpadded
        self._in_speech = False

    def push(self, samples: np.ndarray) -> None:
        """Class the next samples of the stream (in order, as they reach the stream's buffer)."""
        data = np.concatenate([self._partial, samples]) if self._partial.size else samples
        whole = data.size // FRAME * FRAME
        for i in range(0, whole, FRAME):
            speech = self._detect(data[i:i + FRAME])
            start = self._heard + i
            if speech and self._in_speech:
                self._runs[-1][1] = start + FRAME
            elif speech:
                self._runs.append([start, start + FRAME])
            self._in_speech = speech
        self._heard += whole
        self._partial = data[whole:].copy()

    def forget_before(self, sample: int) -> None:
        """Drop runs that end (padded) before ``sample``: the stream no longer holds their audio."""
        while self._runs and self._runs[0][1] + self.pad <= sample:
            self._runs.popleft()

    def speech_start(self, start: int, end: int) -> int | None:
        """The first padded speech sample in ``[start, end)``, or None where there is none."""
        for run_start, run_end in self._runs:
            if run_end + self.pad > start and run_start - self.lead < end:
                return max(start, run_start - self.lead)
        return None

    def speech_end(self, start: int, end: int) -> int | None:
        """Where the padded last speech run in ``[start, end)`` ends (within it), or None."""
        for run_start, run_end in reversed(self._runs):
            if run_end + self.pad > start and run_start - self.lead < end:
                return min(end, run_end + self.pad)
        return None

    def silence_after_speech(self, end: int) -> int:
        """Samples of non-speech between the last speech run and ``end`` (0 while speech goes
        on, or where no speech was heard: there is nothing to end)."""
        if not self._runs or self._in_speech:
            return 0
        return max(0, min(end, self._heard) - self._runs[-1][1])
