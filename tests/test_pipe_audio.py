"""Audio on stdin (``specwhisper stream -``): a WAV stream is parsed, mixed down and resampled; raw
PCM passes through; other containers are refused (``specwhisper.pipe_audio``).

WAVs are built in memory from the bundled sample (16 kHz mono 16-bit) and fed whole and 7 bytes
per read (a pipe's short reads, splitting frames of every width).
"""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from specwhisper.errors import AudioError
from specwhisper.pipe_audio import pipe_chunks

SAMPLE = Path(__file__).resolve().parents[1] / "engine" / "samples" / "morning.flac"
SAMPLE_WORDS = ("kitchen", "thermostat", "jazz")  # of "Good morning, please turn on the kitchen lights, ..."
RATE = 16000


class Trickle(io.RawIOBase):
    """A pipe that hands out at most ``step`` bytes per read, whatever was asked."""

    def __init__(self, data: bytes, step: int = 7) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        n = self.step if size < 0 else min(size, self.step)
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


def _readers(data: bytes):
    return [io.BytesIO(data), Trickle(data)]


@pytest.fixture(scope="module")
def sample() -> np.ndarray:
    """The bundled sample as int16 (its file is 16 kHz mono 16-bit)."""
    audio, rate = sf.read(SAMPLE, dtype="int16")
    assert rate == RATE and audio.ndim == 1
    return audio


def _wav(audio: np.ndarray, rate: int, subtype: str, container: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio, rate, subtype=subtype, format=container)
    return buf.getvalue()


def _riff(fmt: bytes, data: bytes, data_size: int | None = None, after: bytes = b"") -> bytes:
    """A WAV by hand: fmt chunk payload ``fmt``, then a LIST chunk, then the data chunk (its size
    field ``data_size``, the real one by default), then ``after``."""
    size = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"LIST" + struct.pack("<I", 5) + b"INFOx\0"
    body += b"data" + struct.pack("<I", size) + data + after
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + body


def _pcm_fmt(tag: int, channels: int, rate: int, block_align: int, bits: int) -> bytes:
    return struct.pack("<HHIIHH", tag, channels, rate, rate * block_align, block_align, bits)


def _samples(reader) -> tuple[np.ndarray, list[np.ndarray]]:
    chunks = list(pipe_chunks(reader, 0.1))
    assert chunks and all(isinstance(c, np.ndarray) and c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    return np.concatenate(chunks), chunks


def test_a_16k_mono_int16_wav_gives_the_files_samples_exactly(sample):
    wav = _wav(sample, RATE, "PCM_16")
    for reader in _readers(wav):
        out, chunks = _samples(reader)
        np.testing.assert_array_equal(out, sample.astype(np.float32) / 32768)
        assert {c.size for c in chunks[:-1]} == {1600}  # 0.1 s chunks, as the other sources hand out


def test_a_float32_wav_gives_the_files_samples_exactly(sample):
    expected = sample.astype(np.float32) / 32768
    wav = _wav(expected, RATE, "FLOAT")  # libsndfile adds fact and PEAK chunks: skipped
    for reader in _readers(wav):
        np.testing.assert_array_equal(_samples(reader)[0], expected)


@pytest.mark.parametrize("subtype,container", [("PCM_16", "WAV"), ("PCM_24", "WAV"), ("PCM_32", "WAV"),
                                               ("FLOAT", "WAV"), ("PCM_16", "WAVEX"), ("FLOAT", "WAVEX")])
def test_a_stereo_44k_wav_is_mixed_down_and_resampled_to_the_files_audio(sample, subtype, container):
    """Channels differ (0.8 x and 0.4 x): their mean is 0.6 x, resampled to 16 kHz as it streams.
    WAVEX is WAVE_FORMAT_EXTENSIBLE, the subformat in a GUID."""
    x = sample.astype(np.float32) / 32768
    x44 = soxr.resample(x, RATE, 44100, quality="HQ").astype(np.float32)
    stereo = np.stack([0.8 * x44, 0.4 * x44], axis=1)
    expected = soxr.resample(0.6 * x44, 44100, RATE, quality="HQ")
    wav = _wav(stereo, 44100, subtype, container)
    out = _samples(io.BytesIO(wav))[0]
    assert abs(out.size - x.size) <= 0.003 * RATE and abs(out.size - expected.size) <= 0.003 * RATE  # within 3 ms
    n = min(out.size, expected.size)
    assert np.corrcoef(out[:n], expected[:n])[0, 1] > 0.999
    assert np.sqrt(np.mean((out[:n] - expected[:n]) ** 2)) < 0.01 * np.sqrt(np.mean(expected[:n] ** 2))
    # 7-byte reads of its first ~2 s (a cut inside a frame): the same samples, but for the resampler's
    # flush at the (earlier) end.
    short = _samples(Trickle(wav[:2 * 44100 * 8 + 3]))[0]
    tail = round(0.05 * RATE)
    assert short.size > RATE
    np.testing.assert_array_equal(short[:-tail], out[:short.size - tail])


@pytest.mark.parametrize("data_size", [0xFFFFFFFF, 0, 0x7FFFFF00])
def test_a_pipe_writers_unknown_data_size_reads_to_eof(sample, data_size):
    """ffmpeg writes 0xFFFFFFFF to a pipe, arecord 0x7FFFFF00; some write 0: the samples run to EOF."""
    pcm = sample.astype("<i2").tobytes()
    wav = _riff(_pcm_fmt(1, 1, RATE, 2, 16), pcm, data_size)
    for reader in _readers(wav):
        np.testing.assert_array_equal(_samples(reader)[0], sample.astype(np.float32) / 32768)


def test_a_real_data_size_stops_before_the_chunks_after_the_data(sample):
    """A LIST chunk after the samples (editors write one) is not heard as a click of noise."""
    pcm = sample[:8001].astype("<i2").tobytes()
    trailing = b"LIST" + struct.pack("<I", 8) + b"INFOabcd"
    for reader in _readers(_riff(_pcm_fmt(1, 1, RATE, 2, 16), pcm, after=trailing)):
        np.testing.assert_array_equal(_samples(reader)[0], sample[:8001].astype(np.float32) / 32768)


def test_24_bit_in_4_bytes_low_aligned_as_arecord_writes_s24_le(sample):
    """arecord -f S24_LE: bits 24, 4-byte frames, the 24 bits in the low bytes (sign-extended)."""
    values = sample.astype(np.int32) * 256  # 24-bit values
    wav = _riff(_pcm_fmt(1, 1, RATE, 4, 24), values.astype("<i4").tobytes(), 0xFFFFFFFF)
    for reader in _readers(wav):
        np.testing.assert_array_equal(_samples(reader)[0], sample.astype(np.float32) / 32768)


def test_a_partial_frame_at_eof_is_dropped_and_channels_stay_aligned():
    """Stereo int16 whose right channel is silent: a 7-byte read never shifts the left into it."""
    left = (np.arange(4000) % 200 - 100).astype(np.int16) * 100
    frames = np.stack([left, np.zeros_like(left)], axis=1).astype("<i2").tobytes()
    wav = _riff(_pcm_fmt(1, 2, RATE, 4, 16), frames + b"\x01\x02\x03", 0)  # 3 bytes of a 4th frame
    for reader in _readers(wav):
        np.testing.assert_array_equal(_samples(reader)[0], left.astype(np.float32) / 32768 / 2)


@pytest.mark.parametrize("size", [1, 11, 12, 63, 64, 65, 3199, 3200, 3201, 10001])
def test_raw_pcm_passes_through_unchanged_with_its_first_bytes(size):
    raw = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    for reader in _readers(raw):
        chunks = list(pipe_chunks(reader, 0.1))
        assert all(isinstance(c, bytes) for c in chunks) and b"".join(chunks) == raw
    whole = list(pipe_chunks(io.BytesIO(raw), 0.1))
    assert [len(c) for c in whole[:-1]] == [3200] * (len(whole) - 1)  # 0.1 s of 16 kHz int16 a chunk


def test_an_empty_pipe_and_text_piped_by_mistake_are_said():
    """An empty stdin ended with exit 0 and nothing said; text (`seq 1 20000 |`) was heard as PCM
    ("BEEP"). Quiet and loud 16-bit audio is never all printable ASCII for 64 bytes."""
    with pytest.raises(AudioError, match="nothing came on stdin"):
        pipe_chunks(io.BytesIO(b""))
    text = "".join(f"{i}\n" for i in range(1, 2000)).encode()
    for reader in _readers(text):
        with pytest.raises(AudioError, match="stdin holds text, not audio"):
            pipe_chunks(reader)
    quiet = (np.sin(np.arange(3200) / 7) * 300).astype("<i2").tobytes()
    assert b"".join(pipe_chunks(io.BytesIO(quiet))) == quiet


@pytest.mark.parametrize("head,name", [(b"fLaC\0\0\0\x22", "FLAC"), (b"OggS\0\2", "Ogg"), (b"ID3\4\0", "MP3"),
                                       (b"FORM\0\0\1\0AIFF", "AIFF"), (b"caff\0\1\0\0", "CAF"),
                                       (b"RIFF\0\0\0\0AVI LIST", "'AVI', not WAVE")])
def test_another_container_is_refused_with_its_name(head, name):
    with pytest.raises(AudioError) as err:
        pipe_chunks(io.BytesIO(head + bytes(64)))  # at the call, before a sample is taken (before a model loads)
    assert name in err.value.what and "WAV" in err.value.what and "raw" in err.value.what
    assert err.value.where == "stdin" and "path" in err.value.hint and "ffmpeg" in err.value.hint


def test_real_flac_bytes_are_refused(sample):
    buf = io.BytesIO()
    sf.write(buf, sample, RATE, format="FLAC")
    with pytest.raises(AudioError, match="stdin holds FLAC audio"):
        pipe_chunks(io.BytesIO(buf.getvalue()))


def test_bare_mp3_and_aac_frames_are_refused_and_pcm_that_starts_like_one_is_not(sample):
    """MP3 without an ID3 tag (libsndfile writes none; a radio stream has none) starts with a frame
    sync and was transcribed as noise: two frames at the right distance are refused, a lone
    frame-like start of raw PCM passes through whole."""
    buf = io.BytesIO()
    sf.write(buf, sample, RATE, format="MP3")
    mp3 = buf.getvalue()
    assert mp3[:1] == b"\xff" and not mp3.startswith(b"ID3")
    adts_header = bytes([0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC])  # an AAC-LC frame of 16 bytes
    adts = (adts_header + bytes(9)) * 3
    for data, name in ((mp3, "MP3 audio"), (adts, "AAC audio")):
        for reader in _readers(data):
            with pytest.raises(AudioError, match=f"stdin holds {name}"):
                pipe_chunks(reader)
    lone = mp3[:4] + np.random.default_rng(3).integers(0, 256, 6000, dtype=np.uint8).tobytes()
    for raw in (lone, mp3[:200]):  # a frame header then no next one; a stream that ends in its first frame
        for reader in _readers(raw):
            assert b"".join(pipe_chunks(reader, 0.1)) == raw


@pytest.mark.parametrize("subtype,what", [("PCM_U8", "8-bit integer PCM"), ("ALAW", "A-law"),
                                          ("ULAW", "mu-law"), ("MS_ADPCM", "Microsoft ADPCM"),
                                          ("IMA_ADPCM", "IMA ADPCM")])
def test_an_unsupported_wav_encoding_says_which(sample, subtype, what):
    wav = _wav(sample[:4000], RATE, subtype)
    with pytest.raises(AudioError) as err:
        pipe_chunks(Trickle(wav))
    assert what in err.value.what and "16, 24 or 32-bit integer" in err.value.what
    assert err.value.where == "stdin" and "ffmpeg -i IN -f s16le -ac 1 -ar 16000 -" in err.value.hint


@pytest.mark.parametrize("wav,why", [
    (b"RIFF\0\0\0", "12-byte RIFF header"),
    (b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\1\0", "ends inside its fmt chunk"),
    (b"RIFF\0\0\0\0WAVEdata\0\0\0\0\1\2", "data chunk comes before the fmt chunk"),
    (b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0" + _pcm_fmt(1, 1, RATE, 2, 16), "ends before its data chunk"),
    (b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0" + _pcm_fmt(1, 2, RATE, 3, 16) + b"data\0\0\0\0", "2 channels in 3-byte"),
    (b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0" + _pcm_fmt(1, 1, 0, 2, 16) + b"data\0\0\0\0", "sample rate of 0 Hz"),
    (b"RIFF\0\0\0\0WAVEbext\xff\xff\0\0" + bytes(100), "inside its b'bext' chunk"),
])
def test_a_broken_wav_header_is_a_clear_error(wav, why):
    with pytest.raises(AudioError) as err:
        pipe_chunks(io.BytesIO(wav))
    assert "broken header" in err.value.what and why in err.value.what and err.value.where == "stdin"


def test_cli_stream_reads_a_stereo_44k_wav_on_stdin(tiny_model_dir, sample, monkeypatch, capsys):
    """End to end: `specwhisper stream -` fed the bundled sample as a 44.1 kHz stereo WAV (was
    heard as noise: "NG NG Yn yw'n gweld", exit 0), to its last words. Not "jazz in the living
    room" itself: on an AVX2-only EPYC tiny.en's short live windows heard "task in the living room"
    or "heavy believing room" there, by the machine's measured choices (offline: "jazz")."""
    from specwhisper.cli import main

    x44 = soxr.resample(sample.astype(np.float32) / 32768, RATE, 44100, quality="HQ")
    wav = _wav(np.stack([x44, x44], axis=1), 44100, "PCM_16")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(wav)))
    assert main(["stream", "-", "--model", str(tiny_model_dir), "--threads", "2", "--language", "en",
                 "--output-format", "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    text = "".join(e["text"] for e in events if e["type"] == "commit").lower()
    assert "kitchen" in text and "thermostat" in text and re.search(r"play some \w+", text), text
