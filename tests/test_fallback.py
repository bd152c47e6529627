"""Temperature fallback: a window whose greedy text loops is decoded again at the next temperature.

The decision reads only an attempt's text, and every attempt is exact under speculation, so the
fallback keeps speculation lossless; it also removes the loops greedy falls into on digit strings.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_manifest
from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.errors import SpecWhisperError
from specwhisper.fallback import COMPRESSION_RATIO_THRESHOLD, LADDER, compression_ratio, parse_temperatures


def test_compression_ratio_tells_loops_from_speech():
    speech = "And so my fellow Americans, ask not what your country can do for you, ask what you can do."
    assert compression_ratio(speech) < COMPRESSION_RATIO_THRESHOLD
    assert compression_ratio("9-10-7-4-3-" + "6-" * 120) > COMPRESSION_RATIO_THRESHOLD
    assert compression_ratio("") == 0.0


def test_temperatures_parse_as_one_value_or_a_ladder():
    assert parse_temperatures("0") == 0.0 and parse_temperatures(0.7) == 0.7
    assert parse_temperatures("0,0.2,0.4,0.6,0.8,1.0") == LADDER
    assert parse_temperatures([0, 0.5]) == (0.0, 0.5)
    assert parse_temperatures(np.array([0.0, 0.5])) == (0.0, 0.5)
    for bad in ("0,abc", "", "-1", ",", [], "0,11", "0,,0.2", "0,", True):
        with pytest.raises(SpecWhisperError):
            parse_temperatures(bad)


def test_fallback_breaks_a_loop_and_speculation_keeps_every_attempt(base_model_dir, shared_data):
    from specwhisper import WhisperEngine

    clip = next(c for c in load_manifest(shared_data / "longform" / "manifest.jsonl") if c["audio"] == "longform.flac")
    # its first 60 s: two windows and the start of a third, the second with the previous text as
    # prompt and the digit string greedy loops on where a CPU's near-ties let it
    audio = load_audio(clip["path"])[:60 * SAMPLE_RATE]
    engine = WhisperEngine(base_model_dir, compute_type="int8", threads=2)
    options = dict(language="en", numerics="batch-invariant", condition_on_previous_text=True, temperature=LADDER,
                   seed=3)
    eot = engine.tokenizer.special.eot

    def ratio(window) -> float:
        return compression_ratio(engine.tokenizer.decode([t for t in window.tokens if t < eot]))

    plain = engine.transcribe(audio, speculation=False, **options)
    threshold = COMPRESSION_RATIO_THRESHOLD
    if not any(w.temperature > 0 for w in plain.windows):
        # On the Intel Xeon greedy with the previous text as prompt loops on this file; where the
        # CPU's int8 near-ties avoid the loop, a threshold under the loopiest window's ratio
        # makes that window fall back instead.
        threshold = max(ratio(w) for w in plain.windows) - 0.01
        options["compression_ratio_threshold"] = threshold
        plain = engine.transcribe(audio, speculation=False, **options)
    drafted = engine.transcribe(audio, **options)
    assert [w.tokens for w in drafted.windows] == [w.tokens for w in plain.windows]
    assert [w.temperature for w in drafted.windows] == [w.temperature for w in plain.windows]
    assert any(w.temperature > 0 for w in plain.windows), "a window over the threshold must fall back"
    for w in plain.windows:
        assert ratio(w) <= threshold or w.temperature == LADDER[-1]


def test_the_ladder_is_the_default_and_greedy_only_is_one_option(base_engine, shared_data):
    """``transcribe`` and the CLI fall back by default; ``temperature=0`` is greedy only. A
    threshold just under the window's greedy ratio makes the clip's one window fail."""
    from specwhisper.cli import build_parser
    from specwhisper.fallback import parse_temperatures
    from specwhisper.transcribe_options import TranscribeOptions

    assert TranscribeOptions().temperature == LADDER
    assert parse_temperatures(build_parser().parse_args(["transcribe", "x.flac"]).temperature) == LADDER
    path = shared_data / "domain/smarthome/test/000.flac"
    greedy = base_engine.transcribe(path, language="en", temperature=0)
    threshold = greedy.windows[0].compression_ratio - 0.01
    only = base_engine.transcribe(path, language="en", temperature=0, compression_ratio_threshold=threshold)
    assert only.tokens == greedy.tokens and only.windows[0].temperature == 0
    default = base_engine.transcribe(path, language="en", compression_ratio_threshold=threshold, seed=1)
    assert default.windows[0].temperature > 0 and tuple(default.to_dict()["temperature"]) == LADDER


def test_a_short_window_that_fails_is_decoded_in_full_with_the_ladder(base_engine, shared_data):
    """Under ``--audio-ctx auto`` a short window tries the first temperature only; where it fails,
    the audio is decoded again in full context with the whole ladder: the same tokens as asking
    for full context. Greedy only keeps a failing short window (it does not loop to the cap)."""
    path = shared_data / "domain/smarthome/test/000.flac"
    greedy = base_engine.transcribe(path, language="en", audio_ctx="auto", temperature=0)
    assert greedy.audio_ctx < 3000 and greedy.audio_ctx_fallback is None
    threshold = greedy.windows[0].compression_ratio - 0.01
    kept = base_engine.transcribe(path, language="en", audio_ctx="auto", temperature=0,
                                  compression_ratio_threshold=threshold)
    assert kept.tokens == greedy.tokens and kept.audio_ctx_fallback is None
    options = dict(language="en", compression_ratio_threshold=threshold, temperature=(0.0, 0.4), seed=2)
    retried = base_engine.transcribe(path, audio_ctx="auto", **options)
    full = base_engine.transcribe(path, audio_ctx="full", **options)
    assert "failed at temperature 0" in retried.audio_ctx_fallback and retried.audio_ctx == 3000
    assert retried.tokens == full.tokens
    assert [w.temperature for w in retried.windows] == [w.temperature for w in full.windows]
