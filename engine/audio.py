"""Audio in: files, bytes or arrays -> float32 mono 16 kHz, with errors a user can act on."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .errors import AudioError

SAMPLE_RATE = 16000
BUNDLED_SAMPLE = Path(__file__).parent / "samples" / "morning.flac"  # the demo and the self-checks' speech
_SOUNDFILE_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif", ".au", ".caf", ".w64", ".rf64"}

AudioInput = str | Path | bytes | bytearray | np.ndarray | BinaryIO


def load_audio(source: AudioInput, sample_rate: int | None = None) -> np.ndarray:
    """Decode ``source`` into a float32 mono waveform at 16 kHz.

    Arrays are taken as already mono/16 kHz unless ``sample_rate`` says otherwise; a 2-D array
    is (samples, channels). Bytes and paths are decoded with soundfile (wav/flac/ogg), or PyAV
    for compressed and video formats when the ``[av]`` extra is installed.
    """
    if isinstance(source, np.ndarray):
        if source.dtype.kind == "f":
            check_float_range(source, "array")
        return _normalise(source, SAMPLE_RATE if sample_rate is None else sample_rate, "array")
    if hasattr(source, "read"):  # an open file (binary), as faster-whisper's decode_audio takes
        source = source.read()
        if isinstance(source, str):
            raise AudioError("the file object is open in text mode", where="audio",
                             hint="open it with mode 'rb'")
    if isinstance(source, (bytes, bytearray)):
        if not source:
            raise AudioError("audio bytes are empty", where="bytes input", hint="pass the contents of an audio file")
        return _decode(io.BytesIO(bytes(source)), "bytes input", suffix="")
    if not isinstance(source, (str, os.PathLike)):
        raise AudioError(f"audio must be a path, bytes, a binary file object or a numpy array of samples, got "
                         f"{type(source).__name__}", where="audio",
                         hint="pass e.g. 'talk.flac', or np.asarray(samples, dtype=np.float32) at 16 kHz")
    path = check_audio_path(source)
    return _decode(path, str(path), suffix=path.suffix.lower())


def check_audio_path(source: str | os.PathLike[str]) -> Path:
    """The path of an audio file, after the checks that need no decoding (there, a directory,
    empty, a .mp3 without MPEG audio): the command line asks them of every input before the model
    loads, so that a mistyped name is said at once, not after the load."""
    path = Path(source)
    if not path.exists():
        if str(source) == "-":
            raise AudioError("transcribe reads files, not standard input", where="-",
                             hint="save the audio to a file, or stream PCM on stdin with `specwhisper stream -` "
                                  "(or `listen -`)")
        raise AudioError("audio file not found", where=str(path), hint="check the path")
    if path.is_dir():
        raise AudioError("expected an audio file, got a directory", where=str(path),
                         hint="pass the audio files inside it, e.g. DIR/*.flac")
    if path.stat().st_size == 0:
        raise AudioError("audio file is empty (0 bytes)", where=str(path), hint="re-record or re-export the file")
    if _mp3_through_libsndfile(path.suffix.lower()):
        _check_mpeg_audio(path, str(path))
    return path


def _decode(source: Path | io.BytesIO, where: str, suffix: str) -> np.ndarray:
    import soundfile as sf

    mp3 = _mp3_through_libsndfile(suffix)
    if suffix in _SOUNDFILE_SUFFIXES or suffix == "" or mp3:
        try:
            data, rate = sf.read(source, dtype="float32", always_2d=True)
            return _normalise(data, rate, where)
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
            if mp3:
                raise AudioError(f"cannot decode MP3 audio: {exc}", where=where,
                                 hint="the file may be corrupt; or pip install 'specwhisper[av]' (FFmpeg's decoder)") from None
            if suffix in _SOUNDFILE_SUFFIXES:
                raise AudioError(f"cannot decode audio: {exc}", where=where,
                                 hint="the file may be corrupt or not audio; convert it to 16-bit WAV or FLAC") from None
            if isinstance(source, io.BytesIO):
                source.seek(0)
    return _decode_with_av(source, where)


def _decode_with_av(source: Path | io.BytesIO, where: str) -> np.ndarray:
    try:
        import av
    except ImportError:
        if isinstance(source, io.BytesIO):  # raw samples are the usual mistake here, not an mp3
            raise AudioError("these bytes are not WAV, FLAC or OGG, and other formats need PyAV, which is not "
                             "installed", where=where, hint="bytes are an audio file's contents; raw 16-bit PCM is "
                             "np.frombuffer(data, np.int16) (16 kHz mono), or pip install 'specwhisper[av]'") from None
        raise AudioError("not WAV, FLAC or OGG, and other formats need PyAV, which is not installed", where=where,
                         hint="pip install 'specwhisper[av]', or convert the file to WAV/FLAC") from None
    try:
        chunks = []
        with av.open(source if isinstance(source, io.BytesIO) else str(source), mode="r") as container:
            if not container.streams.audio:
                raise AudioError("file has no audio stream", where=where, hint="pass an audio or video file with sound")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except AudioError:
        raise
    except Exception as exc:  # PyAV raises many error types (InvalidDataError, OSError, ...)
        raise AudioError(f"cannot decode audio: {exc}", where=where,
                         hint="the file may be corrupt or not audio") from None
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return _check(audio, where)


MAX_CHANNELS = 64  # more columns than this in a 2-D array with fewer rows is (channels, samples), transposed
MIN_RATE, MAX_RATE = 1000, 1_000_000  # sample rates taken (Hz); audio outside is a mistake, not a recording


def _normalise(data: np.ndarray, rate: int, where: str) -> np.ndarray:
    data = np.asarray(data)
    if data.ndim == 2 and data.shape[1] == 0:
        raise AudioError(f"audio array has no channels (shape {data.shape})", where=where,
                         hint="pass (samples, channels) with at least one channel, or a 1-D mono waveform")
    if data.ndim == 2 and data.shape[0] <= MAX_CHANNELS < data.shape[1]:
        raise AudioError(f"audio array of shape {data.shape} looks like (channels, samples): arrays are "
                         "(samples, channels) or mono", where=where,
                         hint="pass audio.T, or a mono mix: audio.mean(axis=0) (torchaudio.load gives (channels, samples))")
    if data.ndim == 2:
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite results are refused in _check
            data = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    elif data.ndim != 1:
        raise AudioError(f"audio array must be 1-D or (samples, channels), got shape {data.shape}", where=where,
                         hint="pass a mono waveform")
    if data.dtype.kind not in "iuf":
        raise AudioError(f"audio samples must be integers or floats, got {data.dtype}", where=where,
                         hint="pass float32 samples in [-1, 1] or integer PCM")
    if not isinstance(rate, (int, np.integer)) or not MIN_RATE <= rate <= MAX_RATE:
        raise AudioError(f"sample rate must be a whole number of Hz from {MIN_RATE} to {MAX_RATE}, got {rate!r}",
                         where=where, hint="pass the rate the samples were recorded at, e.g. 16000")
    if data.dtype.kind == "i":
        data = data.astype(np.float32) / float(np.iinfo(data.dtype).max + 1)
    elif data.dtype.kind == "u":  # unsigned PCM (8-bit WAV's convention): silence at mid-range
        middle = float(np.iinfo(data.dtype).max + 1) / 2
        data = (data.astype(np.float64) - middle) / middle
    with np.errstate(over="ignore", invalid="ignore"):  # values past float32's range become inf: refused in _check
        data = data.astype(np.float32, copy=False)
    if rate != SAMPLE_RATE and data.size:
        import soxr

        data = soxr.resample(data, rate, SAMPLE_RATE, quality="HQ").astype(np.float32, copy=False)
    return _check(data, where)


# Float samples are in [-1, 1]; a float recording may peak a little above 1, never +24 dB. A peak
# past this is integer PCM cast to float without scaling (jfk * 32767 transcribed "No, no, no.").
MAX_FLOAT_PEAK = 16.0


def check_float_range(samples: np.ndarray, where: str) -> None:
    """Refuse float samples far outside [-1, 1] (int16 values cast to float, the common mistake):
    Whisper's features assume that scale, and such audio decodes to nonsense without a word."""
    with np.errstate(invalid="ignore"):
        peak = float(np.nanmax(np.abs(samples), initial=0.0)) if samples.size else 0.0
    if peak > MAX_FLOAT_PEAK and np.isfinite(peak):
        raise AudioError(f"float samples reach {peak:g}: float audio must be in [-1, 1]", where=where,
                         hint="divide 16-bit samples by 32768 (or pass the int16 array itself, which is scaled)")


def _check(audio: np.ndarray, where: str) -> np.ndarray:
    if audio.size == 0:
        raise AudioError("audio has no samples (zero length)", where=where, hint="pass a file that contains sound")
    if not np.all(np.isfinite(audio)):
        raise AudioError("audio contains NaN or infinite samples", where=where, hint="check the producer of the array")
    return np.ascontiguousarray(audio)


def speech_seconds(samples: np.ndarray, sample_rate: int = SAMPLE_RATE, frame_s: float = 0.02,
                   floor_db: float = -30.0) -> float:
    """Seconds from the first to the last frame within ``floor_db`` of the loudest one.

    A cheap length of what was said, without the silence a recording starts and ends with: the
    same command said again takes about as long, so drafters can tell repeats of different past
    utterances apart by it ("Can you turn on ..." vs "Can you navigate to ...").
    """
    n = int(frame_s * sample_rate)
    frames = samples.size // n
    if frames == 0:
        return samples.size / sample_rate
    energy = np.square(samples[:frames * n].astype(np.float32)).reshape(frames, n).mean(axis=1)
    loud = np.flatnonzero(energy >= energy.max() * 10.0 ** (floor_db / 10.0))
    if loud.size == 0:  # digital silence
        return samples.size / sample_rate
    return (int(loud[-1]) - int(loud[0]) + 1) * frame_s


def _av_installed() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def _check_mpeg_audio(path: Path, where: str) -> None:
    """Refuse a file named .mp3 that holds no MPEG audio before libsndfile's mpg123 is given it
    (it "decoded" a program binary to noise, printing its own errors; see ``mp3_sniff``)."""
    from .mp3_sniff import SOUNDFILE_MAGIC, has_mpeg_audio, not_audio, what_it_is

    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] in SOUNDFILE_MAGIC:  # WAV, FLAC or Ogg named .mp3: libsndfile reads it as what it is
        return
    if not_audio(head) or not has_mpeg_audio(path):
        raise AudioError(f"not MP3 audio: {what_it_is(path)}", where=where,
                         hint="pass an audio file (WAV, FLAC, Ogg, MP3; others with pip install 'specwhisper[av]')")


def _mp3_through_libsndfile(suffix: str) -> bool:
    """MP3 is decoded by libsndfile (1.1+) where PyAV, which decodes it otherwise, is not installed."""
    return suffix == ".mp3" and not _av_installed() and _libsndfile_reads_mp3()


def _libsndfile_reads_mp3() -> bool:
    """Whether the installed libsndfile decodes MP3 (1.1 and later, as soundfile's wheels ship)."""
    import soundfile as sf

    return "MP3" in sf.available_formats()
