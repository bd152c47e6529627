"""Which language the first windows speak: faster-whisper's rule (the first window whose likeliest
language passes the threshold, else the language most windows named), one copy for the engine's
own detection and for ``WhisperModel.detect_language(features=...)``."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .errors import OptionError
from .features import N_FRAMES, window_features

LanguageProbs = list[tuple[str, float]]


def vote_language(windows: Iterable[LanguageProbs], threshold: float | None) -> tuple[str, float, LanguageProbs]:
    """(language, probability, the last window's probabilities) from each window's probabilities,
    likeliest first; ``windows`` is read lazily, so no window past a confident one is encoded.
    ``threshold`` None: the first window decides."""
    votes: dict[str, list[float]] = {}
    probs: LanguageProbs = []
    for probs in windows:
        language, probability = probs[0]
        if threshold is None or probability > threshold:
            return language, probability, probs
        votes.setdefault(language, []).append(probability)
    if not votes:
        raise ValueError("language detection needs at least one window")
    language = max(votes, key=lambda code: len(votes[code]))
    return language, max(votes[language]), probs


def feature_windows(features, n_mels: int, segments: int) -> list[np.ndarray]:
    """The 30 s encoder windows of given log-mel ``features`` ([n_mels, frames], or [1, n_mels,
    frames] as faster-whisper's extractor returns them), the first ``segments`` of them, each
    zero-padded to 3000 frames as faster-whisper pads them."""
    where = "WhisperModel.detect_language(features)"
    try:
        array = np.asarray(features)
    except (TypeError, ValueError):  # ragged lists
        array = None
    if array is not None and array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array is None or array.ndim != 2 or array.shape[0] != n_mels or not array.shape[1]:
        shape = getattr(array, "shape", type(features).__name__)
        raise OptionError(f"features must be a log-mel array of shape ({n_mels}, frames), got {shape}",
                          where=where, hint="pass audio instead, or the feature extractor's output for this model")
    if not np.issubdtype(array.dtype, np.floating) or not np.isfinite(array).all():
        raise OptionError("features must be finite floating-point numbers", where=where,
                          hint="pass audio instead, or the feature extractor's output for this model")
    array = array[:, :segments * N_FRAMES]
    return [window_features(array, start) for start in range(0, array.shape[1], N_FRAMES)]
