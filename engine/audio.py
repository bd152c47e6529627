"""Audio in: files, bytes or arrays -> float32 mono 16 kHz, with errors a user can act on."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .audio_blocks import NothingDecodes, read_soundfile, warn_if_cut_short
from .errors import AudioError

SAMPLE_RATE = 16000
BUNDLED_SAMPLE = Path(__file__).parent / "samples" / "morning.flac"  # the demo and the self-checks' speech
_SOUNDFILE_SUFFIXES = {".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif", ".au", ".caf", ".w64", ".rf64"}

AudioInput = str | Path | bytes | bytearray | memoryview | np.ndarray | BinaryIO


STDIN_WHERE = "standard input"  # the name of audio piped into the command line (``transcribe -``)


def load_audio(source: AudioInput, sample_rate: int | None = None) -> np.ndarray:
    """Decode ``source`` into a float32 mono waveform at 16 kHz.

    Arrays are taken as already mono/16 kHz unless ``sample_rate`` says otherwise; a 2-D array
    is (samples, channels). Bytes (or a memoryview of them, as ``LiveStream.feed`` takes) and
    paths are decoded with soundfile (wav/flac/ogg, and mp3 with libsndfile 1.1+), or PyAV for
    compressed and video formats when the ``[av]`` extra is installed. A file that breaks off
    (cut short in a copy or a download) gives what decodes before the break, with a warning.
    """
    if isinstance(source, np.ndarray):
        if source.dtype.kind == "f":
            check_float_range(source, "array")
        return _normalise(source, SAMPLE_RATE if sample_rate is None else sample_rate, "array")
    if isinstance(source, io.TextIOBase):  # its read() fails on the first byte that is not UTF-8
        raise AudioError("the file object is open in text mode", where="audio", hint="open it with mode 'rb'")
    where = "bytes input"
    if hasattr(source, "read"):  # an open file (binary), as faster-whisper's decode_audio takes
        where = name if isinstance(name := getattr(source, "name", None), str) else where  # errors name the file
        source = source.read()
        if isinstance(source, str):
            raise AudioError("the file object is open in text mode", where="audio",
                             hint="open it with mode 'rb'")
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise AudioError("audio bytes are empty", where=where, hint="pass the contents of an audio file")
        return _decode(io.BytesIO(data), where, suffix="")
    if not isinstance(source, (str, os.PathLike)):
        pair = isinstance(source, tuple) and len(source) == 2 and isinstance(source[1], (int, np.integer))
        raise AudioError(f"audio must be a path, bytes, a binary file object or a numpy array of samples, got "
                         f"{type(source).__name__}", where="audio",
                         hint="pass the samples and their rate apart: transcribe(samples, sample_rate=rate)" if pair
                         else "pass e.g. 'talk.flac', or np.asarray(samples, dtype=np.float32) at 16 kHz (or with "
                              "sample_rate=)")
    path = check_audio_path(source)
    if not path.is_file():  # a pipe or a FIFO: read once, whole (decoders seek)
        return _decode(io.BytesIO(path.read_bytes()), str(path), suffix=path.suffix.lower())
    return _decode(path, str(path), suffix=path.suffix.lower())


def check_audio_path(source: str | os.PathLike[str]) -> Path:
    """The path of an audio file, after the checks that need no decoding (there, a directory,
    empty, a .mp3 without MPEG audio): the command line asks them of every input before the model
    loads, so that a mistyped name is said at once, not after the load."""
    path = Path(source)
    if not path.exists():
        if str(source) == "-":
            raise AudioError("'-' is no file here: audio piped in is read by the command line", where="-",
                             hint="pass the audio's bytes (sys.stdin.buffer.read()), or use `specwhisper transcribe -`")
        if path.is_symlink():
            raise AudioError("audio file not found: a symbolic link whose target is missing or leads back to itself",
                             where=str(path), hint=f"check the link (ls -l {path})")
        raise AudioError("audio file not found", where=str(path), hint="check the path")
    if path.is_dir():
        raise AudioError("expected an audio file, got a directory", where=str(path),
                         hint="pass the audio files inside it, e.g. DIR/*.flac")
    if path.is_file() and path.stat().st_size == 0:  # a pipe (<(cat x.flac), a FIFO) has no size to tell
        raise AudioError("audio file is empty (0 bytes)", where=str(path), hint="re-record or re-export the file")
    if _mp3_through_libsndfile(path.suffix.lower()):
        _check_mpeg_audio(path, str(path))
    return path


_MP3_HINT = "the file may be corrupt; or pip install 'specwhisper[av]' (FFmpeg's decoder)"


def _decode(source: Path | io.BytesIO, where: str, suffix: str) -> np.ndarray:
    import soundfile as sf

    mp3 = _mp3_through_libsndfile(suffix)
    if suffix in _SOUNDFILE_SUFFIXES or suffix == "" or mp3:
        try:
            data, rate = read_soundfile(source, where)
            # float files are read as they are stored: samples far outside [-1, 1] decoded to
            # nonsense (every token "!") with exit 0
            check_float_range(data, where, hint="the file stores float samples far outside [-1, 1]: re-export it "
                                                "normalised, or as 16-bit PCM")
            return _normalise(data, rate, where)
        except NothingDecodes as exc:  # libsndfile knows the format: no other decoder is asked, but
            if suffix == "" and _av_installed():  # for bytes or a bare name, FFmpeg's may know it better
                if isinstance(source, io.BytesIO):
                    source.seek(0)
                return _decode_with_av(source, where)
            raise AudioError(f"cannot decode {'MP3 ' * mp3}audio: {exc}", where=where,
                             hint=_MP3_HINT if mp3 else _undecodable_hint(suffix)) from None
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
            if mp3:
                raise AudioError(f"cannot decode MP3 audio: {exc}", where=where, hint=_MP3_HINT) from None
            if suffix in _SOUNDFILE_SUFFIXES:
                raise AudioError(f"cannot decode audio: {exc}", where=where, hint=_undecodable_hint(suffix)) from None
            if isinstance(source, io.BytesIO):
                source.seek(0)
    return _decode_with_av(source, where, tried_soundfile=suffix == "")


def _undecodable_hint(suffix: str) -> str:
    """What to do with a file libsndfile cannot decode: a damaged file is not mended by
    converting it to its own format, so the advice names another one."""
    other = {".wav": "FLAC", ".flac": "16-bit WAV"}.get(suffix, "16-bit WAV or FLAC")
    return f"the file may be damaged or not audio: check that it plays, or convert it to {other}"


def _soundfile_formats() -> str:
    """The formats libsndfile reads here, as error messages name them (MP3 with libsndfile 1.1+)."""
    return "WAV, FLAC, OGG or MP3" if _libsndfile_reads_mp3() else "WAV, FLAC or OGG"


def _decode_with_av(source: Path | io.BytesIO, where: str, tried_soundfile: bool = True) -> np.ndarray:
    """Decode with PyAV (FFmpeg). ``tried_soundfile``: libsndfile was given the content and could
    not read it (bytes, a path without a suffix); a path with another suffix was never given to it."""
    try:
        import av
    except ImportError:
        if isinstance(source, io.BytesIO):  # raw samples are the usual mistake here, not an mp3
            raw = ("`specwhisper stream -` reads raw 16 kHz 16-bit mono PCM" if where == STDIN_WHERE
                   else "raw 16-bit PCM is np.frombuffer(data, np.int16) (16 kHz mono)")
            raise AudioError(f"these bytes are not {_soundfile_formats()}, and other formats need PyAV, which is "
                             "not installed", where=where, hint=f"bytes are an audio file's contents; {raw}, "
                             "or pip install 'specwhisper[av]'") from None
        what = f"not {_soundfile_formats()}" if tried_soundfile else f"a {source.suffix} file"
        raise AudioError(f"{what}, and other formats need PyAV, which is not installed", where=where,
                         hint="pip install 'specwhisper[av]', or convert the file to WAV/FLAC") from None
    chunks: list[np.ndarray] = []
    try:
        with av.open(source if isinstance(source, io.BytesIO) else str(source), mode="r") as container:
            if not container.streams.audio:
                raise AudioError("file has no audio stream", where=where, hint="pass an audio or video file with sound")
            stream = container.streams.audio[0]
            promised_s = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
            error = _av_samples(av, container, chunks)
    except AudioError:
        raise
    except Exception as exc:  # PyAV raises many error types (InvalidDataError, OSError, ...)
        raise AudioError(f"cannot decode audio: {exc}", where=where,
                         hint="the file may be corrupt or not audio") from None
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    if error is not None and not audio.size:
        raise AudioError(f"cannot decode audio: {error}", where=where, hint="the file may be corrupt or not audio")
    warn_if_cut_short(where, audio.size / SAMPLE_RATE, promised_s, str(error).strip().rstrip(".") if error else None)
    return _check(audio, where)


def _av_samples(av, container, chunks: list[np.ndarray]) -> Exception | None:
    """Append the first audio stream's samples (float32 mono 16 kHz) to ``chunks`` up to its end
    or a decoding error, which is returned: what decoded before a break is kept, as with soundfile."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    error = None
    try:
        for frame in container.decode(audio=0):
            chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(frame))
    except Exception as exc:  # av.error.InvalidDataError and kin: the stream breaks off here
        error = exc
    chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(None))
    return error


MAX_CHANNELS = 64  # more columns than this in a 2-D array with fewer rows is (channels, samples), transposed
MIN_RATE, MAX_RATE = 1000, 1_000_000  # sample rates taken (Hz); audio outside is a mistake, not a recording


def _normalise(data: np.ndarray, rate: int, where: str) -> np.ndarray:
    """``data`` (samples, or (samples, channels)) at ``rate`` as float32 mono at 16 kHz. Integer
    PCM is scaled to [-1, 1] before channels are mixed: a mean of int16 columns is float64 at
    PCM scale (a stereo int16 array gave samples of 1000, not 0.03)."""
    data = np.asarray(data)
    if data.ndim == 2 and data.shape[1] == 0:
        raise AudioError(f"audio array has no channels (shape {data.shape})", where=where,
                         hint="pass (samples, channels) with at least one channel, or a 1-D mono waveform")
    if data.ndim == 2 and data.shape[0] <= MAX_CHANNELS < data.shape[1]:
        raise AudioError(f"audio array of shape {data.shape} looks like (channels, samples): arrays are "
                         "(samples, channels) or mono", where=where,
                         hint="pass audio.T, or a mono mix: audio.mean(axis=0) (torchaudio.load gives (channels, samples))")
    if data.ndim not in (1, 2):
        raise AudioError(f"audio array must be 1-D or (samples, channels), got shape {data.shape}", where=where,
                         hint="pass a mono waveform")
    if data.dtype.kind not in "iuf":
        raise AudioError(f"audio samples must be integers or floats, got {data.dtype}", where=where,
                         hint="pass float32 samples in [-1, 1] or integer PCM")
    if not isinstance(rate, (int, np.integer)) or not MIN_RATE <= rate <= MAX_RATE:
        raise AudioError(f"sample rate must be a whole number of Hz from {MIN_RATE} to {MAX_RATE}, got {rate!r}",
                         where=where, hint="pass the rate the samples were recorded at, e.g. 16000")
    if data.dtype.kind in "iu":
        data = _scale_integer_pcm(data, where)
    with np.errstate(over="ignore", invalid="ignore"):  # values past float32's range become inf: refused in _check
        data = data.astype(np.float32, copy=False)
        if data.ndim == 2:
            data = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if rate != SAMPLE_RATE and data.size:
        import soxr

        data = soxr.resample(data, rate, SAMPLE_RATE, quality="HQ").astype(np.float32, copy=False)
    return _check(data, where)


def _scale_integer_pcm(data: np.ndarray, where: str) -> np.ndarray:
    """Integer PCM as floats in [-1, 1], by its dtype's full scale (unsigned: silence at mid-range,
    8-bit WAV's convention)."""
    if data.dtype.itemsize > 2:
        _refuse_16_bit_values_in_wide_integers(data, where)
    full_scale = float(np.iinfo(data.dtype).max) + 1
    if data.dtype.kind == "i":
        return data.astype(np.float32) / full_scale
    middle = full_scale / 2
    return (data.astype(np.float64) - middle) / middle


def _refuse_16_bit_values_in_wide_integers(data: np.ndarray, where: str) -> None:
    """Refuse an int32/int64 (uint32/uint64) array whose values fit in 16 bits.

    Such an array is 16-bit PCM in a wider type (``np.array(x.tolist())`` of int16 samples is
    int64): scaled by its own dtype's full scale (2**31, 2**63) it is near silence, and the
    transcript came back empty without a word, where a float array at integer scale is refused.
    Real 32-bit PCM this quiet (-96 dBFS) holds nothing to transcribe. All zeros (digital silence)
    is taken.
    """
    lo, hi = (int(data.min()), int(data.max())) if data.size else (0, 0)
    if data.dtype.kind == "i" and (lo or hi) and -32768 <= lo and hi <= 32768:
        raise AudioError(f"{data.dtype} samples peak at {max(-lo, hi)}: they look like 16-bit samples in a wider "
                         f"array, which is scaled by its own full scale (2**{data.dtype.itemsize * 8 - 1}) "
                         "to near silence", where=where,
                         hint="pass samples.astype(np.int16), or floats in [-1, 1]: "
                              "(samples / 32768).astype(np.float32)")
    if data.dtype.kind == "u" and hi and hi <= 65535:
        raise AudioError(f"{data.dtype} samples peak at {hi}: they look like unsigned 16-bit samples in a wider "
                         f"array, which is scaled by its own full scale (2**{data.dtype.itemsize * 8}) "
                         "to a constant", where=where,
                         hint="pass samples.astype(np.uint16) (silence at 32768), or floats in [-1, 1]: "
                              "((samples - 32768) / 32768).astype(np.float32)")


# Float samples are in [-1, 1]; a float recording may peak a little above 1, never +24 dB. A peak
# past this is integer PCM cast to float without scaling (jfk * 32767 transcribed "No, no, no.").
MAX_FLOAT_PEAK = 16.0


def check_float_range(samples: np.ndarray, where: str,
                      hint: str = "divide 16-bit samples by 32768 (or pass the int16 array itself, which is scaled)"
                      ) -> None:
    """Refuse float samples far outside [-1, 1] (int16 values cast to float, the common mistake):
    Whisper's features assume that scale, and such audio decodes to nonsense without a word."""
    # the largest and the smallest, not the largest of a copy made absolute: every file decoded is
    # checked, and an hour's copy is 230 MB more at the peak of loading it
    peak = max(float(np.nanmax(samples, initial=0.0)), -float(np.nanmin(samples, initial=0.0)))
    if peak > MAX_FLOAT_PEAK and np.isfinite(peak):
        raise AudioError(f"float samples reach {peak:g}: float audio must be in [-1, 1]", where=where, hint=hint)


def _check(audio: np.ndarray, where: str) -> np.ndarray:
    if audio.size == 0:
        raise AudioError("audio has no samples (zero length)", where=where, hint="pass a file that contains sound")
    if not (np.isfinite(audio.max()) and np.isfinite(audio.min())):  # NaN wins both; no mask of the whole length
        raise AudioError("audio contains NaN or infinite samples", where=where,
                         hint="check the producer of the array" if where == "array"
                         else "the file holds samples that are not numbers: re-export it from its source")
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

    try:
        with open(path, "rb") as f:
            head = f.read(8)
        if head[:4] in SOUNDFILE_MAGIC:  # WAV, FLAC or Ogg named .mp3: libsndfile reads it as what it is
            return
        refused = not_audio(head) or not has_mpeg_audio(path)
    except OSError as exc:
        raise AudioError(f"cannot read the file: {exc.strerror or exc}", where=where,
                         hint="check that it can be read (its permissions), and that it is not being written") from None
    if refused:
        raise AudioError(f"not MP3 audio: {what_it_is(path)}", where=where,
                         hint="pass an audio file (WAV, FLAC, Ogg, MP3; others with pip install 'specwhisper[av]')")


def _mp3_through_libsndfile(suffix: str) -> bool:
    """MP3 is decoded by libsndfile (1.1+) where PyAV, which decodes it otherwise, is not installed."""
    return suffix == ".mp3" and not _av_installed() and _libsndfile_reads_mp3()


def _libsndfile_reads_mp3() -> bool:
    """Whether the installed libsndfile decodes MP3 (1.1 and later, as soundfile's wheels ship)."""
    import soundfile as sf

    return "MP3" in sf.available_formats()
