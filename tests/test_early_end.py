"""A window that ended early while speech went on (``engine/early_end.py``): found by a helper as a
user transcribing an hour of read speech, where base ended windows after their first sentence at
a change of recording and Whisper's rule skipped the rest of each window (13-28 s, sentences and
all, three times in the hour)."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.early_end import (
    RESEEK_MIN_S,
    overlong_segment,
    restart_frame,
    speech_seconds_in,
    words_past_speech,
)
from specwhisper.window_segments import WindowSegments


@pytest.fixture(scope="module")
def boundary(shared_data) -> np.ndarray:
    """The last 4 s of the LJ passage ("... a transition between Gothic and Roman."), then
    longform.flac's first 60 s (jfk's sentence, then Mr. Quilter): where the hour lost jfk."""
    lj = load_audio(shared_data / "longform/ljspeech_LJ001-0001_to_0032_concat.flac")
    longform = load_audio(shared_data / "longform/longform.flac")
    return np.concatenate([lj[-63515:], longform[:60 * SAMPLE_RATE]])  # where a window of the hour began


@pytest.fixture(scope="module")
def late_boundary(shared_data) -> np.ndarray:
    """The LJ passage's last 1.3 s ("Gothic and Roman."), then longform.flac's first 60 s: where
    the hour's window held one segment timed from 0 to 28.6 s, and jfk was lost after the fix above."""
    lj = load_audio(shared_data / "longform/ljspeech_LJ001-0001_to_0032_concat.flac")
    longform = load_audio(shared_data / "longform/longform.flac")
    return np.concatenate([lj[-21077:], longform[:60 * SAMPLE_RATE]])


def test_speech_after_a_segment_timed_over_the_window_is_transcribed(base_engine, late_boundary, monkeypatch):
    """The window's one segment was timed over most of it, so no 5 s were left after it to ask
    about; its words' alignment ends it at its words (about 1.1 s), and the speech after is decoded.
    The first alignment puts the words where CTranslate2's int8 decoder on oneDNN's AVX2 kernels put
    them (22.18-24.58 s, after jfk's sentence; AVX-512 kernels put them at 0-1.1 s): believed, they
    left 4 s before the next window and jfk was lost. Past speech, they are aligned again before it."""
    moved, crops = [], []
    fit, aligned = WindowSegments._fit_to_words, WindowSegments._aligned

    def as_avx2_put_them(self, run, segments, encoder_output, start, end_frame, language):
        timed = aligned(self, run, segments, encoder_output, start, end_frame, language)
        crops.append((start, end_frame))
        words = [word for seg in timed for word in seg.words]
        if (start, end_frame) == (0, 3000) and words:  # the first window, aligned over all of it
            shift = max(0.0, 22.18 - words[0].start)
            for word in words:
                word.start, word.end = round(word.start + shift, 2), round(word.end + shift, 2)
        return timed

    monkeypatch.setattr(WindowSegments, "_aligned", as_avx2_put_them)
    monkeypatch.setattr(WindowSegments, "_fit_to_words", lambda self, *a: moved.append(fit(self, *a)) or moved[-1])
    result = base_engine.transcribe(late_boundary, language="en", numerics="batch-invariant")
    text = result.text.lower()
    assert text.count("gothic and roman") == 1  # decoded once: the restart came after it
    assert "fellow americans" in text and "quilter" in text  # nothing lost, whichever way it was decoded
    if not any(moved):
        pytest.skip("no segment was timed over its window on this CPU's numerics: the alignment was not needed")
    assert crops[:2] == [(0, 3000), (0, 2218)]  # aligned again before where the first alignment put the words
    first = result.segments[0]
    assert "gothic" in first.text.lower() and first.start_s < 1 and first.end_s < 5


def test_words_aligned_past_speech_are_doubted(shared_data):
    """An overlong segment's words aligned at least 5 s after its decoded start, past speech: the
    alignment is doubted; past quiet or noise (a segment after noise starts at its first word), or
    close to the start, it stands."""
    speech = load_audio(shared_data / "real/audio/jfk.flac")
    quiet = np.random.default_rng(0).normal(0, 1e-4, 30 * SAMPLE_RATE).astype(np.float32)
    window = quiet.copy()
    window[2 * SAMPLE_RATE:2 * SAMPLE_RATE + speech.size] += speech
    assert words_past_speech(window, 0.0, 0.0, 22.18)  # jfk's sentence before the words
    assert words_past_speech(window, 100.0, 100.0, 122.18)  # times are the window's start on
    assert not words_past_speech(quiet, 0.0, 0.0, 22.18)  # nothing said before them
    assert not words_past_speech(window, 0.0, 0.0, 4.0)  # under RESEEK_MIN_S after the start
    assert not words_past_speech(window, 0.0, 14.0, 22.18)  # the segment was decoded from after the speech


def test_a_segment_after_noise_starts_at_its_first_word(base_engine, shared_data):
    """25 s of room noise, then jfk: Whisper times the first segment from the window's edge
    (0.00 to ~29.6 s, as faster-whisper does); its words' alignment starts it when it is said."""
    speech = load_audio(shared_data / "real/audio/jfk.flac")
    noise = np.random.default_rng(0).standard_normal(25 * SAMPLE_RATE).astype(np.float32) * 10 ** (-50 / 20)
    result = base_engine.transcribe(np.concatenate([noise, speech]), language="en")
    first = next(s for s in result.segments if "fellow americans" in s.text.lower())
    assert 23.5 < first.start_s < 26.5
    assert all(s.start_s >= 23.5 for s in result.segments)


def test_a_long_segment_with_few_words_is_worth_aligning():
    assert overlong_segment(0.0, 28.6, 5)  # "Gothic and Roman." over the window
    assert overlong_segment(0.0, 20.0, 5)  # ... or over most of it: speech may hide before 20 s too
    assert not overlong_segment(0.0, 28.6, 60)  # a sentence's pace
    assert not overlong_segment(0.0, 4.0, 1)  # short: restart_frame asks about the rest itself


# The seek after an early end is the same code in either numerics: single-row (CTranslate2's own
# steps, 5 s) with -m full
@pytest.mark.parametrize("numerics", [pytest.param("single-row", marks=pytest.mark.full), "batch-invariant"])
def test_speech_after_a_window_that_ended_early_is_transcribed(base_engine, boundary, numerics):
    result = base_engine.transcribe(boundary, language="en", numerics=numerics)
    first = result.windows[0]
    text = result.text.lower()
    assert "gothic and roman" in first.text.lower()
    assert "fellow americans" in text and "quilter" in text
    # the first window ended after its sentence: the next started there, not 30 s later
    assert first.end_s < 10 and result.windows[1].start_s == first.end_s
    covered = [s for s in result.segments if "fellow" in s.text.lower()]
    assert covered and covered[0].start_s < 12


def test_restart_needs_speech_in_what_is_left(shared_data):
    """Silence or a few clicks after the last segment: Whisper's rule stands (the next window starts
    after this one); speech there: the next window starts at the last segment's end."""
    speech = load_audio(shared_data / "real/audio/jfk.flac")
    quiet = np.random.default_rng(0).normal(0, 1e-4, 30 * SAMPLE_RATE).astype(np.float32)
    assert speech_seconds_in(quiet) < 1.0 and speech_seconds_in(speech) > 3.0
    window = quiet.copy()
    window[8 * SAMPLE_RATE:8 * SAMPLE_RATE + speech.size] += speech
    assert restart_frame(window, 0, 4.0, 3000) == 400
    assert restart_frame(quiet, 0, 4.0, 3000) is None  # nothing said after it
    late = 30 - RESEEK_MIN_S + 0.5
    assert restart_frame(window, 0, late, 3000) is None  # too little left to ask about
    assert restart_frame(window, 0, 4.0, 400) is None  # Whisper seeks to the segment's end anyway
    assert restart_frame(window, 0, 4.0, 2500) == 400  # a segment ending long before the last timestamp


def test_speech_after_digital_silence_is_timed_from_its_own_start(base_engine, shared_data):
    """Silent windows were stepped over 30 s at a time, and the window where speech resumed began
    up to 30 s before it: its first segment was timed from the window's start (15 s early on a file
    with 5 minutes of silence in it). That window now starts just before the first sound."""
    from specwhisper.early_end import first_sound

    jfk = load_audio(shared_data / "real/audio/jfk.flac")
    onset = int(np.flatnonzero(np.abs(jfk) >= 0.01)[0])  # the first sound of the speech
    gap = np.zeros(47 * SAMPLE_RATE, np.float32)
    audio = np.concatenate([jfk, gap, jfk])
    resumes = (jfk.size + gap.size + onset) / SAMPLE_RATE
    result = base_engine.transcribe(audio, language="en", timestamps="on")
    second = [s for s in result.segments if s.start_s > jfk.size / SAMPLE_RATE]
    assert second and "fellow americans" in second[0].text.lower()
    assert abs(second[0].start_s - resumes) < 1.0, (second[0].start_s, resumes)
    assert first_sound(audio, 0, 3000) == 0  # sound at once: the window stays where it was
    silent_start = np.concatenate([gap[:3 * SAMPLE_RATE], jfk])
    assert first_sound(silent_start, 0, 3000) == int(((3 * SAMPLE_RATE + onset_of(jfk, 1e-4)) / SAMPLE_RATE - 0.2) * 100)
    assert first_sound(gap, 0, 3000) == 0  # nothing sounds: the window is skipped as silent, as before
    # the first window keeps its start (it holds the prefix): a prefix after leading zeros stays
    result = base_engine.transcribe(silent_start, language="en", timestamps="on", prefix="Zebra crossing")
    assert result.text.lstrip().startswith("Zebra crossing") and "fellow americans" in result.text.lower()


def onset_of(audio: np.ndarray, peak: float) -> int:
    return int(np.flatnonzero(np.abs(audio) >= peak)[0])


def test_without_the_vad_extra_frame_energy_hears_the_speech(shared_data, monkeypatch):
    """``speech_seconds_in`` falls back on frame energy where Silero is not installed; a window
    restarted after another asks Silero only (energy hears music as speech)."""
    import sys

    monkeypatch.setitem(sys.modules, "specwhisper.vad", None)  # as if the [vad] extra were missing
    speech = load_audio(shared_data / "real/audio/jfk.flac")
    quiet = np.random.default_rng(1).normal(0, 1e-3, 10 * SAMPLE_RATE).astype(np.float32)
    assert speech_seconds_in(speech) > 3.0 and speech_seconds_in(quiet) < 1.0
    assert speech_seconds_in(speech, vad_only=True) == 0.0
