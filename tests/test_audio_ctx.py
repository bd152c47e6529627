"""Short encoder context (opt-in): the rule, Whisper-style padding, and exactness on top of it."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.audio import load_audio
from specwhisper.audio_ctx import AUTO_MARGIN_FRAMES, SHORT_SIZES, choose_frames, parse_audio_ctx
from specwhisper.errors import SpecWhisperError
from specwhisper.features import short_window_features


def test_padding_is_log_mel_of_silence_not_zero(shared_data):
    audio = load_audio(shared_data / "domain/car/test/001.flac")
    feats = short_window_features(audio, 1000)
    assert feats.shape == (80, 1000)
    tail = feats[:, len(audio) // 160 + 5:]
    floor = feats.max() - 2.0  # (max - 8 + 4) / 4 in normalised units
    assert tail.size and np.allclose(tail, floor, atol=1e-3)  # silence sits at the clamp floor ...
    assert not np.allclose(tail, 0.0)  # ... not at zero in the log domain


def test_auto_rule():
    assert choose_frames("full", 100) == 3000
    assert choose_frames("auto", 600 - AUTO_MARGIN_FRAMES) == 600
    assert choose_frames("auto", 600 - AUTO_MARGIN_FRAMES + 1) == 1000
    assert choose_frames("auto", SHORT_SIZES[-1]) == 3000  # too long for a short window: full, as today
    assert choose_frames("auto", 9000) == 3000  # multi-window audio is never shortened
    assert choose_frames(1000, 1200) == 3000  # a pinned size that cannot hold the audio falls back to full


def test_parse_errors():
    assert parse_audio_ctx("3000") == "full"
    assert parse_audio_ctx("1500") == 1500
    for bad in ("1234", "short", "-5"):
        with pytest.raises(SpecWhisperError, match="audio-ctx|audio context"):
            parse_audio_ctx(bad)


def test_short_context_is_faster_recorded_and_exact_under_speculation(base_engine, shared_data):
    path = shared_data / "domain/smarthome/test/000.flac"
    full = base_engine.transcribe(path, language="en", audio_ctx="full", numerics="single-row")
    short = base_engine.transcribe(path, language="en", audio_ctx="auto", numerics="single-row")
    assert full.audio_ctx == 3000 and short.audio_ctx in SHORT_SIZES
    assert short.to_dict()["audio_ctx"] == short.audio_ctx
    assert short.timings["encoder_s"] < full.timings["encoder_s"]
    plain = base_engine.transcribe(path, language="en", audio_ctx=1000, numerics="batch-invariant",
                                   speculation=False)
    spec = base_engine.transcribe(path, language="en", audio_ctx=1000, numerics="batch-invariant", draft_len=6)
    assert spec.tokens == plain.tokens and spec.numerics == "batch-invariant"


def test_loop_guard_rule():
    from specwhisper.transcriber import looks_like_a_loop

    assert not looks_like_a_loop(20, 3.0)  # a command
    assert not looks_like_a_loop(55, 2.0)
    assert looks_like_a_loop(224, 3.0)  # the decoder repeating itself to the cap
    assert not looks_like_a_loop(150, 19.0)  # long, dense speech is not a loop
