"""Where the next window starts, beyond Whisper's rule: after a window that ended early while
speech went on, and past digital silence.

Whisper's long-form rule (openai-whisper's and faster-whisper's alike): a window whose text ends
with a single timestamp is complete, "no speech after the last timestamp", and the next window
starts after the whole window. The model sometimes ends a window after its first sentence while
speech goes on (at a change of speaker or recording): on an hour of read speech, base dropped three
stretches of 13-28 s that way, sentences and all, with nothing said about it. So where such a
window leaves at least ``RESEEK_MIN_S`` after its last segment (or its last segment ends that
long before its last timestamp, see below), the rest is asked whether it holds
speech (Silero VAD where the ``[vad]`` extra is installed, else frame energy over the stretch's own
quiet frames); if it does, the next window starts where the last segment ended, and decides
what that audio says (Whisper's no-speech rule still skips it where the model hears none).
Where the window's last segment is timed over most of the window ("Gothic and Roman." from 0 to
28.6 s: seconds per token no speaker takes), no 5 s are left after it; its words' alignment (what
word timestamps run) says where they end (1.1 s there), and the segment ends there instead, with
the same question asked of what follows up to where the next window would start. An alignment
that puts the words past seconds of speech inside the segment (at least ``RESEEK_MIN_S`` after its
decoded start, with ``SPEECH_MIN_S`` of speech between) is not believed: the model timed the
words from that start, and an alignment gone wrong put them there (CTranslate2's int8 decoder on
oneDNN's AVX2 kernels, AMD's default, put "Gothic and Roman." at 22.2-24.6 s, after jfk's sentence:
4 s before the next window, nothing asked, jfk lost; float32, MKL's int8 kernels and oneDNN held to
SSE4.1 all put it at 0-1.1 s). The words are aligned again over the audio before where the first
alignment put them (0-1.1 s there); where that is no better, the segment keeps its decoded times.

A window that starts in digital silence (samples of exactly nothing: a recording paused, files
joined) starts at its first sound instead: Whisper stepped over silent windows 30 s at a time, and
the window where the speech resumed began up to 30 s before it; the model then timed its first
segment from the window's start (a subtitle 15 s early on a file with 5 minutes of silence in it).
"""

from __future__ import annotations

import numpy as np

from .audio import SAMPLE_RATE
from .errors import SpecWhisperError
from .vad import FRAME  # samples: Silero's frame at 16 kHz, the energy check's too

RESEEK_MIN_S = 5.0  # seconds after a complete window's last segment worth asking about
SPEECH_MIN_S = 1.0  # of speech in them that a window should not skip
VAD_THRESHOLD = 0.5  # Silero's speech probability (its usual threshold)
QUIET_PERCENTILE = 10  # the stretch's quiet frames (its 10th percentile of frame level): the energy
# check's floor, with the margin and minimum of listen's energy detector
SILENCE_PEAK = 1e-4  # samples under this (-80 dBFS) are digital silence (the transcriber's bound too)
SLOW_TOKEN_S = 1.0  # a segment timed over this many seconds per text token (speech runs ~0.3) or more
LEADING_SILENCE_S = 1.0  # digital silence at a window's start worth stepping over ...
SOUND_LEAD_S = 0.2  # ... to this much before its first sound


def speech_seconds_in(samples: np.ndarray, vad_only: bool = False) -> float:
    """Seconds of speech frames in ``samples`` (16 kHz mono float32); ``vad_only``: none where
    Silero is not installed (frame energy hears music and tones as speech too)."""
    frames = samples.size // FRAME
    if frames == 0:
        return 0.0
    try:
        from .vad import get_vad_model

        probs = get_vad_model()(np.ascontiguousarray(samples[:frames * FRAME], dtype=np.float32))
        speech = int(np.count_nonzero(np.asarray(probs)[:frames] >= VAD_THRESHOLD))
    except (ImportError, SpecWhisperError):  # the [vad] extra is not installed: frame energy
        if vad_only:
            return 0.0
        from .listen_endpoint import (  # (it imports the transcriber, which imports this)
            MARGIN_DB,
            MIN_SPEECH_DB,
        )

        blocks = samples[:frames * FRAME].reshape(frames, FRAME).astype(np.float64)
        level = 10.0 * np.log10(np.mean(blocks * blocks, axis=1) + 1e-12)
        floor = np.percentile(level, QUIET_PERCENTILE)
        speech = int(np.count_nonzero(level >= max(floor + MARGIN_DB, MIN_SPEECH_DB)))
    return speech * FRAME / SAMPLE_RATE


def restart_frame(waveform: np.ndarray, window_start: int, last_segment_end_s: float, next_start: int,
                  vad_only: bool = False) -> int | None:
    """The 10 ms frame where the next window should start instead of ``next_start`` (where
    Whisper's rule puts it: this window's end after a single timestamp, else its last timestamp),
    or None where Whisper's rule stands: less than ``RESEEK_MIN_S`` between the last segment's end
    and ``next_start``, or too little speech there (``vad_only``: as Silero hears it; a window
    restarted after another, over music energy would chain them)."""
    restart = round(last_segment_end_s * 100)
    if restart <= window_start or next_start - restart < RESEEK_MIN_S * 100:
        return None
    rest = waveform[restart * SAMPLE_RATE // 100:next_start * SAMPLE_RATE // 100]
    return restart if speech_seconds_in(rest, vad_only) >= SPEECH_MIN_S else None


def words_past_speech(samples: np.ndarray, window_start_s: float, segment_start_s: float,
                      first_word_s: float) -> bool:
    """Whether a segment decoded from ``segment_start_s`` whose words were aligned from
    ``first_word_s`` (seconds; ``samples``: the window's audio from ``window_start_s``) leaves
    speech before them the model would have skipped: at least ``RESEEK_MIN_S`` between, holding
    ``SPEECH_MIN_S`` of speech. Then the alignment is doubted rather than the model's start:
    believing it leaves that speech untranscribed, where doubting it at worst decodes the words
    again. As Silero hears it only: frame energy hears music too, and words after an intro of
    music are where the alignment puts them (doubted there, they would be decoded twice)."""
    if first_word_s - segment_start_s < RESEEK_MIN_S:
        return False
    between = samples[max(0, round((segment_start_s - window_start_s) * SAMPLE_RATE)):
                      round((first_word_s - window_start_s) * SAMPLE_RATE)]
    return speech_seconds_in(between, vad_only=True) >= SPEECH_MIN_S


def overlong_segment(start_s: float, end_s: float, text_tokens: int) -> bool:
    """Whether a segment (``start_s`` to ``end_s``, ``text_tokens`` of text) lasts far longer than
    its words could: its times are not its words' (a segment after noise starts at the window's
    edge), and where it is a window's last, speech the model left out may hide in it, before as
    well as after what ``restart_frame`` asks about. Worth an alignment of its words."""
    duration = end_s - start_s
    return duration >= RESEEK_MIN_S + SPEECH_MIN_S and duration >= SLOW_TOKEN_S * max(1, text_tokens)


def first_sound(waveform: np.ndarray, start: int, end: int) -> int:
    """The 10 ms frame a window at ``start`` (frames; it ends at ``end`` at the latest) should start
    at: ``SOUND_LEAD_S`` before its first sample of sound where at least ``LEADING_SILENCE_S`` of
    digital silence comes first, else ``start`` (also where nothing sounds before ``end``: the
    caller skips a silent window as it did). Reads the window's first second where it sounds."""
    first = start * SAMPLE_RATE // 100
    head = waveform[first:first + round(LEADING_SILENCE_S * SAMPLE_RATE)]
    if head.size == 0 or float(np.abs(head).max()) >= SILENCE_PEAK:
        return start
    rest = np.abs(waveform[first + head.size:end * SAMPLE_RATE // 100]) >= SILENCE_PEAK
    if not rest.any():
        return start
    return start + int(((head.size + int(np.argmax(rest))) / SAMPLE_RATE - SOUND_LEAD_S) * 100)
