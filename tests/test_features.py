"""Log-mel features match faster-whisper's FeatureExtractor (the numeric oracle, stored as a fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

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
