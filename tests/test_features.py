"""Log-mel features match faster-whisper's FeatureExtractor (the numeric oracle, stored as a fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cpu_use import cpu_of_others

from specwhisper.audio import load_audio
from specwhisper.features import N_FRAMES, content_frames, log_mel_spectrogram, mel_filters, window_features

FIXTURE = Path(__file__).parent / "fixtures" / "mel_oracle.npz"


@pytest.fixture(scope="module")
def oracle():
    if not FIXTURE.is_file():
        pytest.skip("tests/fixtures/mel_oracle.npz missing (python -m benchmarks.make_oracle_fixtures)")
    data = np.load(FIXTURE, allow_pickle=False)
    return data, json.loads(str(data["meta"]))


def test_matches_faster_whisper_80_and_128_bins(oracle, shared_data):
    data, meta = oracle
    assert len(meta["arrays"]) >= 5
    for name, info in meta["arrays"].items():
        n_mels = int(name.split("_")[0][3:])
        audio = load_audio(shared_data / info["clip"])
        mel = log_mel_spectrogram(audio, n_mels=n_mels)
        assert mel.shape[1] == info["raw_frames"]
        ours = window_features(mel[:, :content_frames(mel)], 0)  # the window the engine encodes
        expected = data[name]
        diff = np.abs(ours[:, :expected.shape[1]] - expected).max()
        assert diff < 1e-3, f"{name}: max abs diff {diff}"


def test_filterbank_shape_and_area():
    for n in (80, 128):
        f = mel_filters(n)
        assert f.shape == (n, 201) and (f >= 0).all() and (f.sum(axis=1) > 0).all()


def test_window_is_padded_to_30_s():
    mel = log_mel_spectrogram(np.zeros(16000, np.float32) + 0.01)
    assert window_features(mel, 0).shape == (80, N_FRAMES)


def test_features_leave_no_blas_thread_spinning_and_keep_their_bits(monkeypatch):
    """OpenBLAS spreads the filterbank product over every core and its workers then spin ~0.1 s,
    taking a core from the encoder that runs next; the product runs on the calling thread alone,
    with the same bits. Where one thread changes them (OpenBLAS's AVX2 kernels round by the split:
    an ulp on an AVX2-only EPYC, which moved faster-whisper's near-ties), BLAS keeps its threads."""
    import contextlib
    import os

    import specwhisper.features as features
    from specwhisper.blas_threads import _local_setters, _one_thread_keeps_bits

    if not _local_setters():
        pytest.skip("numpy's BLAS here has no per-thread thread count (OpenBLAS >= 0.3.27): nothing to check")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: BLAS has no worker threads to spin")
    audio = np.random.default_rng(3).standard_normal(30 * 16000).astype(np.float32) * 0.1
    ours = log_mel_spectrogram(audio)
    idle = sum(cpu_of_others(lambda: log_mel_spectrogram(audio)))
    monkeypatch.setattr(features, "features_blas_threads", contextlib.nullcontext)
    spread = log_mel_spectrogram(audio)
    busy = max(sum(cpu_of_others(lambda: log_mel_spectrogram(audio))) for _ in range(3))  # a CI run once saw none
    assert np.array_equal(ours, spread), "one BLAS thread changed the features' bits"
    if not _one_thread_keeps_bits():
        pytest.skip("one BLAS thread changes a product's bits on this CPU: the features keep BLAS's threads here")
    if busy < 0.03:
        pytest.skip(f"BLAS threads did not spin here even when spread ({busy * 1000:.0f} ms): nothing to compare")
    assert idle < 0.02, f"{idle * 1000:.0f} ms of CPU beside the features (spread over threads: {busy * 1000:.0f} ms)"


def test_features_have_the_same_bits_whatever_the_environment_limits_blas_to(tmp_path):
    """Ray starts its workers with ``OMP_NUM_THREADS=1``: on an AVX2-only EPYC, where OpenBLAS
    rounds by its split over threads, a Ray worker's features (and near-tie words) differed from a
    local run's. The product runs on a count the engine fixes, whatever the environment says."""
    import os
    import subprocess
    import sys

    out = tmp_path / "features.npy"
    code = ("import numpy as np; from specwhisper.features import log_mel_spectrogram; "
            "a = np.random.default_rng(3).standard_normal(30 * 16000).astype(np.float32) * 0.1; "
            f"np.save({str(out)!r}, log_mel_spectrogram(a))")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    audio = np.random.default_rng(3).standard_normal(30 * 16000).astype(np.float32) * 0.1
    assert np.array_equal(np.load(out), log_mel_spectrogram(audio))


def _whole_array_log_mel(audio: np.ndarray, n_mels: int, padding: int = 160) -> np.ndarray:
    """The definition at full length, copies and all: the oracle of the block-wise features (the
    filterbank product in the same blocks of frames on one thread, as BLAS rounds a product by its
    shape and, with AVX2 kernels, by its split over threads)."""
    from specwhisper.blas_threads import features_blas_threads
    from specwhisper.features import _BLOCK

    audio = np.pad(audio.astype(np.float32), (0, padding))
    audio = np.pad(audio, (0, max(0, 201 - audio.size)))
    padded = np.pad(audio, (200, 200), mode="reflect")
    n_frames = (padded.size - 400) // 160
    frames = np.stack([padded[i * 160:i * 160 + 400] for i in range(n_frames)])
    window = np.hanning(401)[:-1].astype(np.float32)
    power = (np.abs(np.fft.rfft(frames * window, axis=-1).astype(np.complex64)) ** 2).T
    with features_blas_threads():
        product = np.concatenate([mel_filters(n_mels) @ power[:, i:i + _BLOCK] for i in range(0, n_frames, _BLOCK)]
                                 or [np.zeros((n_mels, 0), np.float32)], axis=1)
    log_spec = np.log10(np.maximum(product, 1e-10))
    return ((np.maximum(log_spec, log_spec.max() - 8.0) + 4.0) / 4.0).astype(np.float32)


def test_block_wise_features_equal_the_whole_array_definition_at_every_edge():
    """The reflected edges and the zero tail are made for the edge blocks alone (no padded copy of
    the waveform): the same bits as the definition, for lengths around a frame, a hop and a block."""
    from specwhisper.features import _BLOCK, HOP_LENGTH

    rng = np.random.default_rng(3)
    for length in (0, 1, 40, 200, 201, 399, 400, 401, 16000, _BLOCK * HOP_LENGTH - 1,
                   _BLOCK * HOP_LENGTH, _BLOCK * HOP_LENGTH + 241, 2 * _BLOCK * HOP_LENGTH + 159):
        audio = (0.1 * rng.standard_normal(length)).astype(np.float32)
        for n_mels, padding in ((80, 160), (128, 0)):
            ours = log_mel_spectrogram(audio, n_mels=n_mels, padding=padding)
            expected = _whole_array_log_mel(audio, n_mels, padding)
            assert ours.shape == expected.shape, (length, padding)
            assert np.array_equal(ours, expected), (length, padding, np.abs(ours - expected).max())


def test_long_features_take_no_copy_of_the_waveform():
    """Ten more minutes of audio raise the peak by their features (19 MB), not by padded copies
    of the waveform: those took three times its size again (an hour: 1.0 GB at the peak for
    345 MB of waveform and features; 9 hours ran out of memory in 24 GB)."""
    import tracemalloc

    peaks, sizes = [], []
    for minutes in (10, 20):
        audio = np.zeros(minutes * 60 * 16000, np.float32)
        audio[::7] = 0.01
        tracemalloc.start()
        try:
            sizes.append(log_mel_spectrogram(audio).nbytes)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    grew, features_grew = peaks[1] - peaks[0], sizes[1] - sizes[0]
    assert grew < 1.5 * features_grew, f"peak grew {grew / 1e6:.0f} MB for {features_grew / 1e6:.0f} MB of features"
