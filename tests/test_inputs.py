"""Bad input gets a clear error (what, where, what to do) and a non-zero exit, never a traceback."""

from __future__ import annotations

import gc
import io
import json
import os
import shutil
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio import BUNDLED_SAMPLE, SAMPLE_RATE, load_audio
from specwhisper.cli import main
from specwhisper.errors import AudioError, ModelError, OptionError


def _cli(args, capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_missing_file(base_model_dir, capsys, tmp_path):
    rc, out, err = _cli(["transcribe", str(tmp_path / "nope.wav"), "--model", str(base_model_dir)], capsys)
    assert rc != 0 and "audio file not found" in err and "nope.wav" in err and "Traceback" not in err
    (tmp_path / "a.flac").symlink_to(tmp_path / "b.flac")  # a link that leads back to itself: not "not found" alone
    (tmp_path / "b.flac").symlink_to(tmp_path / "a.flac")
    rc, out, err = _cli(["transcribe", str(tmp_path / "a.flac"), "--model", str(base_model_dir)], capsys)
    assert rc != 0 and "symbolic link whose target is missing or leads back to itself" in err


def test_directory_is_refused(tmp_path):
    with pytest.raises(AudioError, match="directory"):
        load_audio(tmp_path)


def test_non_audio_bytes(tmp_path):
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is not audio at all" * 100)
    with pytest.raises(AudioError, match="cannot decode"):
        load_audio(junk)
    with pytest.raises(AudioError):
        load_audio(b"\x00\x01garbage" * 50)


def test_channels_first_arrays_and_raw_pcm_bytes_get_clear_errors(base_engine):
    """A (channels, samples) array (torchaudio.load's) was read as 1-2 samples of (samples,
    channels) and gave empty text; raw PCM bytes were told to install PyAV."""
    audio = np.zeros((2, SAMPLE_RATE), np.float32)
    for wrong in (audio, audio[:1]):
        with pytest.raises(AudioError, match="looks like .channels, samples.") as info:
            base_engine.transcribe(wrong)
        assert "audio.mean(axis=0)" in info.value.hint
    assert load_audio(audio.T).shape == (SAMPLE_RATE,)  # (samples, channels) is mixed down
    try:
        import av  # noqa: F401
    except ImportError:
        with pytest.raises(AudioError, match="not WAV, FLAC,? (or )?OGG") as info:
            load_audio((np.zeros(1600) * 0).astype("<i2").tobytes())
        assert "np.frombuffer(data, np.int16)" in info.value.hint


def test_zero_length_audio(tmp_path):
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioError, match="no samples"):
        load_audio(empty)
    (tmp_path / "zero.flac").write_bytes(b"")
    with pytest.raises(AudioError, match="empty"):
        load_audio(tmp_path / "zero.flac")


def test_mp3_without_pyav_names_the_extra(tmp_path, monkeypatch):
    fake = tmp_path / "clip.mp3"
    fake.write_bytes(b"ID3" + b"\x00" * 200)
    monkeypatch.setitem(sys.modules, "av", None)  # as if PyAV were not installed
    with pytest.raises(AudioError, match=r"specwhisper\[av\]"):
        load_audio(fake)
    # a real MP3 needs no extra where libsndfile reads MP3 (soundfile's wheels ship 1.1+)
    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile reads no MP3")
    original = load_audio(BUNDLED_SAMPLE)
    sf.write(tmp_path / "real.mp3", original, 16000, format="MP3")
    decoded = load_audio(tmp_path / "real.mp3")
    assert abs(decoded.size - original.size) < 2000 and np.abs(decoded).max() > 0.1


def test_a_file_named_mp3_that_is_not_mpeg_audio_is_refused_by_what_it_is(tmp_path, monkeypatch):
    """libsndfile's mpg123 resyncs on anything: a program binary named .mp3 "decoded" to noise (exit
    0, an empty transcript, a dozen mpg123 errors on stderr) and a text file failed with "File does
    not exist or is not a regular file". Now a .mp3 is asked for MPEG frames first."""
    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile reads no MP3")
    monkeypatch.setitem(sys.modules, "av", None)  # libsndfile's decoder, as without the [av] extra
    notes = tmp_path / "notes.mp3"
    notes.write_text("meeting notes, not a recording\n" * 20)
    with pytest.raises(AudioError, match="not MP3 audio: it is text"):
        load_audio(notes)
    program = tmp_path / "program.mp3"
    program.write_bytes(Path(sys.executable).resolve().read_bytes()[:300_000])
    with pytest.raises(AudioError, match="not MP3 audio: it starts as a Linux program"):
        load_audio(program)
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8).tobytes())
    with pytest.raises(AudioError, match="not MP3 audio"):
        load_audio(junk)
    original = load_audio(BUNDLED_SAMPLE)
    flac = tmp_path / "really.flac.mp3"  # FLAC named .mp3: read as what it is
    sf.write(flac, original, 16000, format="FLAC")
    assert load_audio(flac).size == original.size
    for rate in (8000, 22050, 44100):  # MPEG-1, 2 and 2.5 streams, a long and a two-frame one
        import soxr

        audio = soxr.resample(original, 16000, rate)
        for n in (audio.size, 400):
            path = tmp_path / f"{rate}-{n}.mp3"
            sf.write(path, audio[:n], rate, format="MP3")
            assert load_audio(path).size > 0


def _cut(source: Path, path: Path, size: int) -> Path:
    """``path`` holding the first ``size`` bytes of ``source``: a copy or download cut short."""
    path.write_bytes(source.read_bytes()[:size])
    return path


def test_a_cut_flac_is_transcribed_as_far_as_it_decodes_with_a_warning(tiny_engine, shared_data, tmp_path):
    """longform.flac cut to 700 KB failed whole ("cannot decode audio: flac decoder lost sync",
    told to convert the FLAC to FLAC) though its first 67 s decode."""
    cut = _cut(shared_data / "longform/longform.flac", tmp_path / "cut.flac", 700_000)
    with pytest.warns(UserWarning, match=r"cut short or damaged after 67\.1 s of the 150\.2 s its header gives "
                                         r"\(flac decoder lost sync\)") as caught:
        result = tiny_engine.transcribe(cut, language="en")
    assert caught[0].filename == __file__ and str(cut) in str(caught[0].message)
    assert result.duration_s == pytest.approx(67.07, abs=0.01)
    text = result.text.lower()
    assert "and so my fellow americans" in text and "apostle of the middle classes" in text
    with pytest.warns(UserWarning, match="bytes input: the audio is cut short or damaged after 67.1 s"):
        assert load_audio(cut.read_bytes()).size == result.duration_s * SAMPLE_RATE
    nothing = _cut(cut, tmp_path / "head.flac", 3000)  # the header and no whole frame: an error, as before
    with pytest.raises(AudioError, match="cannot decode audio: flac decoder lost sync") as info:
        load_audio(nothing)
    assert "FLAC" not in info.value.hint and "16-bit WAV" in info.value.hint


def test_cut_wav_and_mp3_warn_in_the_same_words(tmp_path):
    """A WAV or MP3 cut short was transcribed as far as it went without a word: libsndfile counts
    a WAV's frames from its size (the header's data length says more), an MP3's from its Xing
    header. A whole file, and a WAV streamed with an open length, give no warning."""
    audio = load_audio(BUNDLED_SAMPLE)
    whole = tmp_path / "whole.wav"
    sf.write(whole, audio, SAMPLE_RATE, subtype="PCM_16")  # a 44-byte header, then 2 bytes a sample
    assert whole.stat().st_size == 44 + 2 * audio.size > 44 + 2 * SAMPLE_RATE
    with pytest.warns(UserWarning, match=r"cut short or damaged after 1\.0 s of the \d+\.\d s its header gives "
                                         r"\(the file ends early\)"):
        assert load_audio(_cut(whole, tmp_path / "cut.wav", 44 + 2 * SAMPLE_RATE)).size == SAMPLE_RATE
    streamed = bytearray(whole.read_bytes()[:44 + 2 * SAMPLE_RATE])
    streamed[40:44] = b"\xff\xff\xff\xff"  # the data length a writer to a pipe leaves open
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_audio(whole).size == audio.size and load_audio(bytes(streamed)).size == SAMPLE_RATE
    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile reads no MP3")
    mp3 = tmp_path / "whole.mp3"
    sf.write(mp3, np.tile(audio, 4), SAMPLE_RATE, format="MP3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_audio(mp3)
    with pytest.warns(UserWarning, match=r"cut short or damaged after \d+\.\d s of the \d+\.\d s its header gives "
                                         r"\(the file ends early\)"):
        cut = load_audio(_cut(mp3, tmp_path / "cut.mp3", mp3.stat().st_size // 2))
    assert 0.3 < cut.size / (4 * audio.size) < 0.7


def test_a_long_file_is_read_into_one_array_of_its_length(tmp_path):
    """A file is read block by block (what decodes before a break is kept), into one array its
    header sizes: blocks joined at the end took the audio's size twice at the peak. The samples
    are libsndfile's own, for WAV and FLAC and for a FLAC streamed without its length."""
    import tracemalloc

    rng = np.random.default_rng(5)
    peaks, sizes = [], []
    for minutes in (5, 10):
        path = tmp_path / f"{minutes}.wav"
        sf.write(path, (0.1 * rng.standard_normal(minutes * 60 * SAMPLE_RATE)).astype(np.float32), SAMPLE_RATE,
                 subtype="PCM_16")
        tracemalloc.start()
        try:
            audio = load_audio(path)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        sizes.append(audio.nbytes)
        assert np.array_equal(audio, sf.read(path, dtype="float32")[0])
    grew, audio_grew = peaks[1] - peaks[0], sizes[1] - sizes[0]
    assert grew < 1.3 * audio_grew, f"peak grew {grew / 1e6:.0f} MB for {audio_grew / 1e6:.0f} MB of samples"
    flac = tmp_path / "long.flac"
    sf.write(flac, sf.read(tmp_path / "5.wav", dtype="int16")[0][:70 * SAMPLE_RATE + 123], SAMPLE_RATE)
    assert np.array_equal(load_audio(flac), sf.read(flac, dtype="float32")[0])


def test_a_flac_written_to_a_pipe_is_whole_and_a_cut_one_is_said(tmp_path):
    """A FLAC written to a pipe (``ffmpeg ... -f flac -``) has no length in its header, and
    libsndfile fails on its last block whole or cut: a whole one was called "cut short or
    damaged" and lost up to 64 ms. Its last frame's CRC now tells: whole, all but its last sample
    and no warning; cut inside a frame, the warning as before."""
    import warnings

    rng = np.random.default_rng(6)
    flac = tmp_path / "whole.flac"
    sf.write(flac, (3000 * rng.standard_normal(70 * SAMPLE_RATE + 123)).astype(np.int16), SAMPLE_RATE)
    expected = sf.read(flac, dtype="float32")[0]
    piped = bytearray(flac.read_bytes())
    piped[8 + 13:8 + 18] = bytes([piped[8 + 13] & 0xF0, 0, 0, 0, 0])  # STREAMINFO's total samples: unknown
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for source in (bytes(piped), _written(tmp_path / "piped.flac", piped)):
            audio = load_audio(source)
            assert expected.size - 1 <= audio.size <= expected.size
            assert np.array_equal(audio, expected[:audio.size])
    with pytest.warns(UserWarning, match=r"cut short or damaged after 69\.\d s"):
        assert load_audio(bytes(piped[:-100])).size < expected.size - 1000
    damaged = piped[:]  # whole at its end, broken inside: its last frame's header gives the length it falls short of
    damaged[len(piped) * 3 // 10:len(piped) * 3 // 10 + 200] = bytes(200)
    with pytest.warns(UserWarning, match=r"cut short or damaged after 2\d\.\d s"):
        assert load_audio(bytes(damaged)).size < expected.size * 0.4


def _written(path: Path, data: bytes | bytearray) -> Path:
    path.write_bytes(bytes(data))
    return path


def test_pyav_decodes_a_cut_file_as_far_as_it_goes(shared_data, tmp_path):
    """With the [av] extra, formats libsndfile is not given (an MP3, a name it does not know) go to
    PyAV: a stream that breaks off keeps what decoded before the break, with the same warning."""
    pytest.importorskip("av")
    cut = _cut(shared_data / "longform/longform.flac", tmp_path / "cut.audio", 700_000)  # FFmpeg probes it
    with pytest.warns(UserWarning, match=r"cut\.audio: the audio is cut short or damaged after 67\.1 s of the "
                                         r"150\.2 s its header gives \(.*\): transcribing the 67\.1 s that decode"):
        assert load_audio(cut).size == pytest.approx(67.07 * SAMPLE_RATE, abs=SAMPLE_RATE // 100)
    if "MP3" not in sf.available_formats():
        pytest.skip("this libsndfile writes no MP3")
    mp3 = tmp_path / "whole.mp3"
    sf.write(mp3, np.tile(load_audio(BUNDLED_SAMPLE), 4), SAMPLE_RATE, format="MP3")
    with pytest.warns(UserWarning, match=r"cut short or damaged after \d+\.\d s of the \d+\.\d s its header "
                                         r"gives \(the file ends early\)"):
        load_audio(_cut(mp3, tmp_path / "cut.mp3", mp3.stat().st_size // 2))


def test_stereo_48k_works_and_matches_mono(base_engine, shared_data, tmp_path):
    mono = load_audio(shared_data / "real/audio/jfk.flac")
    import soxr

    up = soxr.resample(mono, 16000, 48000)
    stereo = np.stack([up, up], axis=1)
    path = tmp_path / "jfk48k.wav"
    sf.write(path, stereo, 48000, subtype="FLOAT")
    assert abs(load_audio(path).size - mono.size) < 20
    result = base_engine.transcribe(path, language="en")
    assert "fellow americans" in result.text.lower()


def test_an_array_at_another_rate_is_resampled_with_sample_rate(base_engine, shared_data, tmp_path):
    """A notebook reads 44.1 kHz with soundfile: ``sample_rate`` resamples the array as a file at
    that rate is resampled (without it the array is read as 16 kHz: confident nonsense)."""
    import soxr

    mono = load_audio(shared_data / "real/audio/jfk.flac")
    stereo = np.stack([soxr.resample(mono, 16000, 44100)] * 2, axis=1)
    path = tmp_path / "jfk44k.wav"
    sf.write(path, stereo, 44100, subtype="FLOAT")
    samples, rate = sf.read(path, dtype="float32")
    from_array = base_engine.transcribe(samples, language="en", sample_rate=rate)
    assert from_array.tokens == base_engine.transcribe(path, language="en").tokens
    assert "fellow americans" in from_array.text.lower()
    with pytest.raises(OptionError, match="sample_rate is for an array"):
        base_engine.transcribe(path, language="en", sample_rate=44100)
    with pytest.raises(AudioError) as caught:
        base_engine.transcribe((samples, rate), language="en")
    assert "sample_rate=rate" in caught.value.hint


def test_tenth_of_a_second(base_engine):
    rng = np.random.default_rng(0)
    result = base_engine.transcribe((0.01 * rng.standard_normal(1600)).astype(np.float32), language="en")
    assert isinstance(result.text, str) and result.duration_s == pytest.approx(0.1)


def test_ten_minutes_of_silence_is_fast(base_engine):
    t0 = time.perf_counter()
    result = base_engine.transcribe(np.zeros(16000 * 600, np.float32), language="en")
    assert result.text == ""
    assert len(result.windows) == 20 and all(w.numerics == "skipped" for w in result.windows)
    assert time.perf_counter() - t0 < 20


def test_bytes_and_array_inputs(base_engine, shared_data):
    data = (shared_data / "real/audio/jfk.flac").read_bytes()
    from_bytes = base_engine.transcribe(data, language="en")
    from_array = base_engine.transcribe(load_audio(shared_data / "real/audio/jfk.flac"), language="en")
    assert from_bytes.tokens == from_array.tokens and "ask not" in from_bytes.text.lower()
    # a memoryview of them, as LiveStream.feed takes, was refused ("got memoryview")
    assert base_engine.transcribe(memoryview(data), language="en").tokens == from_bytes.tokens
    assert np.array_equal(load_audio(memoryview(bytearray(data))), load_audio(data))


def test_bytes_errors_name_mp3_where_libsndfile_reads_it(monkeypatch):
    """Random bytes were "not WAV, FLAC or OGG, and other formats need PyAV" while MP3 bytes decode
    without PyAV (libsndfile 1.1+)."""
    monkeypatch.setitem(sys.modules, "av", None)  # as without the [av] extra
    reads_mp3 = "MP3" in sf.available_formats()
    junk = np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    with pytest.raises(AudioError, match="these bytes are not WAV, FLAC, OGG or MP3," if reads_mp3
                       else "these bytes are not WAV, FLAC or OGG,"):
        load_audio(junk)
    if not reads_mp3:
        pytest.skip("this libsndfile reads no MP3")
    buffer = io.BytesIO()
    sf.write(buffer, load_audio(BUNDLED_SAMPLE), SAMPLE_RATE, format="MP3")
    assert load_audio(buffer.getvalue()).size > SAMPLE_RATE  # what the message says is read


def test_integer_arrays_holding_16_bit_values_in_a_wider_type_are_refused(base_engine, shared_data):
    """jfk's int16 samples as int64 (np.array(x.tolist())) or int32 were scaled by 2**63 / 2**31 to
    near silence and transcribed to '' without a word, where float samples at that scale are
    refused. Real 32-bit PCM, int16 itself and all-zero arrays (digital silence) are taken."""
    x, _ = sf.read(shared_data / "real/audio/jfk.flac", dtype="int16")
    for wide in (np.array(x.tolist()), x.astype(np.int32)):
        with pytest.raises(AudioError, match=f"{wide.dtype} samples peak at 25648: they look like 16-bit samples "
                                             "in a wider array") as info:
            base_engine.transcribe(wide, language="en")
        assert "samples.astype(np.int16)" in info.value.hint and "/ 32768" in info.value.hint
    for wide in (x.astype(np.int32) + 32768, x.astype(np.int64) + 32768):  # unsigned 16-bit values
        with pytest.raises(AudioError, match="look like unsigned 16-bit samples") as info:
            load_audio(wide.astype(np.uint32 if wide.dtype == np.int32 else np.uint64))
        assert "samples.astype(np.uint16)" in info.value.hint
    assert np.array_equal(load_audio(x.astype(np.uint16) ^ 0x8000), load_audio(x))  # uint16 is scaled
    pcm32 = x.astype(np.int32) << 16  # 32-bit PCM: the same waveform
    assert np.array_equal(load_audio(pcm32), load_audio(x))
    assert "ask not" in base_engine.transcribe(pcm32, language="en").text.lower()
    assert base_engine.transcribe(np.zeros(SAMPLE_RATE, np.int64), language="en").text == ""


def test_multichannel_integer_arrays_are_scaled_before_mixing():
    """A (samples, 2) int16 array was mixed to float64 at PCM scale and never scaled (samples of
    1000, not 0.03): integer PCM is scaled first, then mixed."""
    mono = (0.3 * np.sin(np.arange(SAMPLE_RATE) / 10) * 32767).astype(np.int16)
    for samples in (mono, mono.astype(np.int32) << 16, (mono // 256 + 128).astype(np.uint8)):
        both = load_audio(np.stack([samples, samples], axis=1))
        np.testing.assert_allclose(both, load_audio(samples), atol=1e-6)
        assert 0.25 < np.abs(both).max() < 0.35


def test_file_objects_decode_and_other_types_are_refused_clearly(shared_data, tmp_path):
    path = shared_data / "real/audio/jfk.flac"
    with open(path, "rb") as f:
        assert np.array_equal(load_audio(f), load_audio(path))  # as faster-whisper's decode_audio takes
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with open(text) as f, pytest.raises(AudioError, match="text mode"):
        load_audio(f)
    for bad in (None, 5, [0.0] * 1600):
        with pytest.raises(AudioError, match=f"got {type(bad).__name__}"):
            load_audio(bad)


def test_unknown_options_and_bad_thresholds_are_named(base_engine, shared_data):
    from specwhisper.errors import SpecWhisperError, UnknownOptionError
    from specwhisper.transcribe_options import TranscribeOptions

    with pytest.raises(UnknownOptionError, match="unknown option 'foo'") as info:
        base_engine.transcribe(shared_data / "real/audio/jfk.flac", foo=1)
    assert info.value.where == "WhisperEngine.transcribe" and "temperature" in info.value.hint
    assert TranscribeOptions(compression_ratio_threshold=None).thresholds.compression_ratio is None  # no such test
    for bad in ("x", True, 0):
        with pytest.raises(SpecWhisperError, match="compression ratio threshold"):
            TranscribeOptions(compression_ratio_threshold=bad)


def test_option_mistakes_are_value_errors_named_before_any_work(tiny_engine, tiny_model_dir):
    """A user's helper found a string "false" read as on (word_timestamps, speculation: a config
    file's value), wrong types failing deep in a load or a decoding with a bare TypeError, token ids
    past the vocabulary failing in an ONNX Runtime Gather, and the same kind of mistake raising
    three classes. Each is now an OptionError (a ValueError) naming the option, before any audio
    is read or any model loads, and every error class is importable from ``specwhisper``."""
    import specwhisper
    from specwhisper import WhisperEngine

    audio = np.zeros(SAMPLE_RATE, np.float32)
    per_call = {"word_timestamps": "false", "speculation": "false", "condition_on_previous_text": "yes",
                "draft_len": "3", "task": "summarize", "numerics": "fast", "timestamps": "yes", "seed": -1,
                "temperature": -1, "audio_ctx": 123, "language": "xx", "initial_prompt": [10**9],
                "prefix": [tiny_engine.tokenizer.vocab_size], "suppress_tokens": [-1, 10**6]}
    for name, value in per_call.items():
        with pytest.raises(OptionError) as info:
            tiny_engine.transcribe(audio, **{name: value})
        assert name in info.value.where and info.value.hint, name
    with pytest.raises(OptionError, match="draft length 2.5"):
        tiny_engine.transcribe(audio, draft_len=2.5)
    with pytest.raises(OptionError) as info:  # the flag that sets it, not a --speculation that is not there
        tiny_engine.transcribe(audio, speculation="no")
    assert info.value.where == "speculation (--no-speculation)"
    with pytest.raises(OptionError) as info:  # no flag at all: not a --suppress-blank that is not there
        tiny_engine.transcribe(audio, suppress_blank="no")
    assert info.value.where == "suppress_blank (Python API)"
    per_engine = {"compute_type": "int4", "decoder_threads": "1", "threads": "2", "device": "gpu",
                  "encoder": "bogus", "batch_decoder": "x", "learn": "no"}
    for name, value in per_engine.items():
        t0 = time.perf_counter()
        with pytest.raises(OptionError) as info:
            WhisperEngine(tiny_model_dir, **{name: value})
        assert name in info.value.where and time.perf_counter() - t0 < 0.5, name  # nothing loaded
    with pytest.raises(OptionError, match="compute type None"):
        WhisperEngine(tiny_model_dir, compute_type=None)
    # what still works: 1 / 0 and numpy bools for switches, numpy ints, every compute type CTranslate2
    # takes ("float" too), a code in capitals
    from specwhisper.transcribe_options import COMPUTE_TYPES, TranscribeOptions

    assert "float" in COMPUTE_TYPES and TranscribeOptions(draft_len=np.int64(4)).draft_len == 4
    with pytest.raises(OptionError, match="speculation"):
        TranscribeOptions(speculation=np.array([True, False]))
    assert tiny_engine.transcribe(audio, word_timestamps=np.bool_(False), speculation=1, language="EN").language == "en"
    assert tiny_engine.transcribe(audio, language="English").language == "en"  # a name, as openai-whisper takes
    assert tiny_engine.transcribe(audio, language="auto").language_source == "english-only model"  # detect
    for name in ("AudioError", "ModelError", "NetworkError", "OptionError", "OutputError", "TokenMapError",
                 "UnknownModelError", "UnknownOptionError", "LiveEvent", "CommandResult"):
        assert name in specwhisper.__all__ and getattr(specwhisper, name)
    assert issubclass(specwhisper.OptionError, ValueError) and issubclass(specwhisper.OptionError,
                                                                        specwhisper.SpecWhisperError)


def test_a_results_json_keeps_its_word_timings(tiny_engine):
    """``Result.to_dict()`` left the words out (only the CLI's writer added them): an app that
    serialised its result lost them. The writer and the dict now share ``Segment.to_dict``."""
    from specwhisper.audio import BUNDLED_SAMPLE
    from specwhisper.writers import render

    result = tiny_engine.transcribe(BUNDLED_SAMPLE, word_timestamps=True)
    words = [w.word for s in result.segments for w in s.words]
    assert len(words) >= 5
    for data in (result.to_dict(), json.loads(render(result, "json"))):
        assert [w["word"] for s in data["segments"] for w in s["words"]] == words
    assert "words" not in tiny_engine.transcribe(BUNDLED_SAMPLE).to_dict()["segments"][0]


def test_corrupt_model_dir(tmp_path, capsys):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "model.bin").write_bytes(b"\x00" * 1000)
    (bad / "config.json").write_text(json.dumps({"suppress_ids": [], "alignment_heads": []}))
    (bad / "tokenizer.json").write_text("{}")
    rc, out, err = _cli(["transcribe", str(BUNDLED_SAMPLE), "--model", str(bad)], capsys)
    assert rc == 2 and "error:" in err and str(bad) in err and "Traceback" not in err


def test_a_tokenizer_is_read_once_until_its_files_change(tmp_path, tiny_model_dir):
    """Engines, draft models and token maps of one model share its tokenizer (reading tokenizer.json
    took 0.13-0.16 s each time); a file rewritten or replaced since is read again, and a damaged one
    is the clear error it always was."""
    from specwhisper.tokenizer import WhisperTokenizer

    model = tmp_path / "tiny"
    model.mkdir()
    for f in ("tokenizer.json", "config.json", "vocabulary.txt"):
        shutil.copy(tiny_model_dir / f, model / f)
    first = WhisperTokenizer.from_model_dir(model)
    assert WhisperTokenizer.from_model_dir(model) is first and first.fingerprint()
    good = (model / "tokenizer.json").read_text()
    (model / "tokenizer.json").write_text("{}")  # in place, by an editor or a broken copy
    with pytest.raises(ModelError, match="tokenizer.json cannot be read"):
        WhisperTokenizer.from_model_dir(model)
    (model / "tokenizer.json.new").write_text(good)
    os.replace(model / "tokenizer.json.new", model / "tokenizer.json")  # replaced whole, as a pull does
    again = WhisperTokenizer.from_model_dir(model)
    assert again is not first and again.fingerprint() == first.fingerprint()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"lang_ids": []}))  # every file it reads counts
    assert WhisperTokenizer.from_model_dir(model) is not again
    held = weakref.ref(again)
    del first, again
    gc.collect()
    assert held() is None  # not kept once nothing holds it (an app that closed its engines gets it back)


def test_model_of_wrong_kind(tmp_path, base_model_dir):
    from specwhisper.model_store import check_model_dir

    other = tmp_path / "translator"
    other.mkdir()
    for f in ("model.bin", "tokenizer.json"):
        (other / f).symlink_to(base_model_dir / f)
    (other / "config.json").write_text(json.dumps({"add_source_bos": False, "unk_token": "<unk>"}))
    with pytest.raises(ModelError, match="not describe a Whisper model"):
        check_model_dir(other)


def test_unknown_model_name(capsys):
    rc, out, err = _cli(["transcribe", str(BUNDLED_SAMPLE), "--model", "whisper-gigantic"], capsys)
    assert rc == 2 and "unknown model 'whisper-gigantic'" in err and "tiny.en" in err


def test_an_unknown_language_is_one_usage_error_before_any_file(capsys, shared_data):
    """``transcribe a.wav b.wav --language xx`` failed each file in turn (exit 1, the error twice)."""
    jfk = str(shared_data / "real/audio/jfk.flac")
    rc, out, err = _cli(["transcribe", jfk, jfk, "--language", "xx", "--model", "tiny.en"], capsys)
    assert rc == 2 and err.count("unknown language 'xx'") == 1 and not out


def test_unknown_language(base_engine, shared_data):
    from specwhisper.errors import SpecWhisperError

    with pytest.raises(SpecWhisperError, match="language") as info:
        base_engine.transcribe(shared_data / "real/audio/jfk.flac", language="klingon")
    assert "English-only" not in info.value.hint  # base is multilingual: no English-only advice
    assert info.value.where == "language (--language)"  # the API's keyword and the CLI's flag


def test_an_english_only_model_warns_for_another_language_and_refuses_an_unknown_one(tiny_engine):
    """tiny.en took any --language without a word (and base's error said English-only models take
    only 'en'): another known code now decodes as English with a warning, as faster-whisper's
    facade does, and a code Whisper does not know is an error on any model."""
    audio = np.zeros(SAMPLE_RATE, np.float32)
    with pytest.warns(UserWarning, match="English-only: language 'fr' is decoded as English") as caught:
        assert tiny_engine.transcribe(audio, language="fr").language == "en"
    assert caught[0].filename == __file__  # attributed to the caller's line, not the engine's
    with pytest.warns(UserWarning, match="needs word_timestamps=True") as caught:
        tiny_engine.transcribe(audio, hallucination_silence_threshold=2.0)
    assert caught[0].filename == __file__
    with pytest.warns(UserWarning, match="English-only"):
        tiny_engine.stream("de").finish()
    for call in (lambda: tiny_engine.transcribe(audio, language="xx"), lambda: tiny_engine.stream("xx"),
                 lambda: tiny_engine.listen("xx")):
        with pytest.raises(OptionError, match="unknown language 'xx'"):
            call()


def test_float_samples_far_outside_one_are_refused(base_engine):
    """int16 samples cast to float without dividing by 32768 decoded to "No, no, no." without a
    word; such arrays are refused, a float recording a little past full scale is not."""
    wave = (0.3 * np.sin(np.arange(SAMPLE_RATE) / 10)).astype(np.float32)
    with pytest.raises(AudioError, match="float samples reach") as info:
        base_engine.transcribe(wave * 32767)
    assert "32768" in info.value.hint
    with pytest.raises(AudioError, match="float samples reach"):
        base_engine.stream("en").feed(wave * 1000)
    assert load_audio(wave * 3).size == SAMPLE_RATE  # +10 dB past full scale: taken as it is
    assert load_audio((wave * 32767).astype(np.int16)).max() < 1  # integer PCM is scaled
    for bad in (np.nan, np.inf, -np.inf):  # found by the extremes, without a mask of the whole length
        with pytest.raises(AudioError, match="NaN or infinite"):
            load_audio(np.where(np.arange(wave.size) == 4321, bad, wave).astype(np.float32))


def test_cli_subprocess_reports_without_traceback(tmp_path):
    """The installed console entry point, as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "specwhisper", "transcribe", str(BUNDLED_SAMPLE), "--model",
                           str(tmp_path / "missing-model")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_every_option_error_names_a_flag_that_exists():
    """An option's error names the command line's flag beside the keyword: the flag must be one
    ``specwhisper transcribe`` takes, or the keyword is said to be the Python API's only."""
    import dataclasses

    from specwhisper.cli import build_parser
    from specwhisper.errors import option_where
    from specwhisper.transcribe_options import TranscribeOptions

    parser = build_parser().command_parsers["transcribe"]
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for field in dataclasses.fields(TranscribeOptions):
        named = option_where(field.name).split("(", 1)[1].rstrip(")")
        assert named == "Python API" or set(named.split("/")) <= flags, (field.name, named)


def test_what_a_hostile_input_tester_found(tiny_model_dir, capsys, tmp_path, monkeypatch):
    """Session 61's helper: threads and beams far too many (a segfault, a stall, 24 GB and an OOM
    kill), a prompt of bytes that are not UTF-8 (the tokenizer's TypeError after the load), a float
    WAV at 1e30 (exit 0 with "!!!!"), a pipe called empty, a text-mode file object (UnicodeDecodeError),
    and --skip-existing keeping a 0-byte json: each a clear error, or done right, before any load."""
    import os

    jfk = BUNDLED_SAMPLE
    for flags, said in ((["--threads", "100000"], "more than this machine can use"),
                        (["--beam-size", "100000"], "beam_size must be at most 64"),
                        (["--initial-prompt", "caf\udce9"], "bytes that are not UTF-8")):
        rc, _, err = _cli(["transcribe", str(jfk), "--model", "no-such-model", *flags], capsys)
        assert rc == 2 and said in err and "Traceback" not in err, (flags, err)
    loud = np.zeros(SAMPLE_RATE, np.float32)
    loud[100] = 1e30
    sf.write(tmp_path / "loud.wav", loud, SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match="float samples reach 1e\\+30") as info:
        load_audio(tmp_path / "loud.wav")
    assert "re-export" in info.value.hint
    with pytest.raises(OptionError, match="hotwords is not valid text"):
        from specwhisper.transcribe_options import TranscribeOptions

        TranscribeOptions(hotwords="caf\udce9")
    with pytest.raises(AudioError, match="text mode"), open(jfk, encoding="utf-8") as text:
        load_audio(text)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    writer = threading.Thread(target=lambda: fifo.write_bytes(Path(jfk).read_bytes()), daemon=True)
    writer.start()  # (its open waits for the reader's)
    assert np.array_equal(load_audio(fifo), load_audio(jfk))  # was "audio file is empty (0 bytes)"
    writer.join(timeout=30)
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{Path(jfk).stem}.json").write_text("")
    rc, _, err = _cli(["transcribe", str(jfk), "--model", str(tiny_model_dir), "--threads", "2", "--skip-existing",
                       "--output-format", "json", "--output-dir", str(out)], capsys)
    assert rc == 0 and "not a whole json output: transcribed again" in err
    assert json.loads((out / f"{Path(jfk).stem}.json").read_text())["text"]


def test_a_file_whose_name_is_not_utf8_is_read(shared_data, tmp_path):
    """A name in Latin-1 bytes (``lat\\xe9.flac``, as older systems and archives write them) was
    "cannot decode audio: ... surrogates not allowed ... the file may be damaged": soundfile encodes
    names as UTF-8 strictly: libsndfile gets the name's bytes (PyAV reads such names itself)."""
    import os

    path = Path(os.fsdecode(bytes(tmp_path) + b"/lat\xe9.flac"))
    shutil.copy(shared_data / "real/audio/jfk.flac", path)
    expected = load_audio(shared_data / "real/audio/jfk.flac")
    assert np.array_equal(load_audio(path), expected)
    import importlib.util

    if importlib.util.find_spec("av") is not None:  # the [av] extra
        from specwhisper.audio import _decode_with_av

        assert abs(_decode_with_av(path, str(path)).size - expected.size) < 1600
