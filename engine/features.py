"""Whisper's log-mel spectrogram in numpy (80 or 128 bins), numerically matching faster-whisper.

Definition: 25 ms periodic-Hann frames every 10 ms (n_fft 400, hop 160, reflect-centred), power
spectrum, Slaney-style mel filters, log10 clamped to (max - 8), then scaled by (x + 4) / 4.
Like faster-whisper, the clamp uses the maximum over the whole input, and windows shorter than
30 s are padded with zeros in the normalised log domain (see ``window_features``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .blas_threads import features_blas_threads

N_FFT = 400
HOP_LENGTH = 160
SAMPLE_RATE = 16000
N_FRAMES = 3000  # one 30 s window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH
_BLOCK = 6000  # frames per block (60 s)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney mel filterbank [n_mels, n_fft // 2 + 1]: linear below 1 kHz, logarithmic above, area-normalised."""
    f_sp = 200.0 / 3.0
    brk_hz = 1000.0
    brk_mel = brk_hz / f_sp
    log_step = np.log(6.4) / 27.0

    def hz_to_mel(f: float) -> float:
        return f / f_sp if f < brk_hz else brk_mel + np.log(f / brk_hz) / log_step

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m < brk_mel, m * f_sp, brk_hz * np.exp(log_step * (m - brk_mel)))

    edges_hz = mel_to_hz(np.linspace(0.0, hz_to_mel(sample_rate / 2.0), n_mels + 2))
    bins_hz = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    lo, mid, hi = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bins_hz[None, :] - lo) / (mid - lo)
    falling = (hi - bins_hz[None, :]) / (hi - mid)
    weights = np.clip(np.minimum(rising, falling), 0.0, None)
    weights *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]
    return weights.astype(np.float32)


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = HOP_LENGTH) -> np.ndarray:
    """Log-mel features [n_mels, frames] of a float32 16 kHz waveform (``padding`` zeros appended first).

    Works block by block on views of ``audio``: the zero tail and the reflected edges are made
    for the edge blocks alone. Padded copies of the whole waveform took three times its size
    again at the peak (an hour of audio: 1.0 GB for 345 MB of waveform and features; 9 hours
    ran out of memory), where the features are now the only new array of that length."""
    audio = np.asarray(audio, dtype=np.float32)
    length = max(audio.size + padding, N_FFT // 2 + 1)  # reflect padding needs over half a frame
    n_frames = length // HOP_LENGTH  # frames of the centred STFT, less the last, which Whisper drops
    window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    filters = mel_filters(n_mels)
    log_spec = np.empty((n_mels, n_frames), dtype=np.float32)
    for first in range(0, n_frames, _BLOCK):  # blocks bound the temporaries for long audio
        count = min(_BLOCK, n_frames - first)
        samples = _centred_samples(audio, length, first * HOP_LENGTH, (count - 1) * HOP_LENGTH + N_FFT)
        frames = np.lib.stride_tricks.as_strided(
            samples, shape=(count, N_FFT), strides=(samples.strides[0] * HOP_LENGTH, samples.strides[0]),
        )
        spectrum = np.fft.rfft(frames * window, axis=-1).astype(np.complex64)
        power = (np.abs(spectrum) ** 2).T
        with features_blas_threads():  # see blas_threads: the encoder runs next, on every core
            product = filters @ power
        log_spec[:, first:first + count] = np.log10(np.maximum(product, 1e-10))
    np.maximum(log_spec, log_spec.max() - 8.0, out=log_spec)
    log_spec += 4.0
    log_spec /= 4.0
    return log_spec


def _centred_samples(audio: np.ndarray, length: int, start: int, count: int) -> np.ndarray:
    """Samples [start, start + count) of ``audio`` zero-extended to ``length`` and reflect-padded
    by half a frame at both ends (``np.pad(..., mode="reflect")``, as Whisper centres its frames):
    a view of ``audio`` inside it, a small copy at the edges."""
    half = N_FFT // 2
    if start >= half and start + count - half <= audio.size:
        return audio[start - half:start - half + count]
    at = np.arange(start - half, start - half + count)
    at = np.where(at < 0, -at, at)
    at = np.where(at >= length, 2 * (length - 1) - at, at)
    inside = at < audio.size
    samples = np.zeros(count, np.float32)
    samples[inside] = audio[at[inside]]
    return samples


def window_features(features: np.ndarray, start: int, n_frames: int = N_FRAMES) -> np.ndarray:
    """Frames [start, start + n_frames) of ``features``, zero-padded (as faster-whisper does) to n_frames."""
    segment = features[:, start : start + n_frames]
    if segment.shape[1] < n_frames:
        segment = np.pad(segment, ((0, 0), (0, n_frames - segment.shape[1])))
    return np.ascontiguousarray(segment, dtype=np.float32)


def content_frames(features: np.ndarray) -> int:
    """Frames that carry audio (faster-whisper counts features.shape[-1] - 1)."""
    return max(features.shape[-1] - 1, 0)


def short_window_features(audio: np.ndarray, frames: int, n_mels: int = 80) -> np.ndarray:
    """Features of a window shorter than 30 s, padded the way Whisper pads: with the log-mel of
    silence (audio zeros, which the log clamp turns into max - 8), never zeros in the log domain."""
    need = frames * HOP_LENGTH
    padded = np.pad(np.asarray(audio, dtype=np.float32), (0, max(0, need - len(audio))))
    mel = log_mel_spectrogram(padded[:need], n_mels=n_mels)
    return np.ascontiguousarray(mel[:, :frames])


def bundled_sample_window(n_mels: int, n_frames: int = N_FRAMES) -> np.ndarray:
    """The first window of the bundled sample: the real speech the self-test and the encoder
    check run on (a window of ``n_frames`` mel frames)."""
    from .audio import BUNDLED_SAMPLE, load_audio

    return window_features(log_mel_spectrogram(load_audio(BUNDLED_SAMPLE), n_mels=n_mels), 0, n_frames=n_frames)
