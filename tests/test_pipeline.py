"""Encoding the next window while this one decodes changes timings only, never tokens."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from specwhisper.pipeline import EncoderAhead


def test_encoder_ahead_hands_out_outputs_in_order_and_skips_silent_windows():
    segments = [np.full(3, i, dtype=np.float32) for i in range(5)]
    segments[2] = None  # silence: never encoded
    encoded: list[int] = []
    threads: set[str] = set()

    def encode(features):
        threads.add(threading.current_thread().name)
        encoded.append(int(features[0]))
        return float(features.sum())

    outputs = []
    with EncoderAhead(encode, lambda i: segments[i], len(segments), enabled=True) as ahead:
        for i in (0, 1, 3, 4):
            outputs.append(ahead.get(i)[0])
            ahead.start_after(i)
    assert outputs == [0.0, 3.0, 9.0, 12.0]
    assert sorted(encoded) == [0, 1, 3, 4]  # each window once, the silent one never
    assert any(name.startswith("encoder-ahead") for name in threads)


def test_encoder_ahead_disabled_encodes_in_the_caller():
    names = []
    ahead = EncoderAhead(lambda f: names.append(threading.current_thread().name) or 1, lambda i: np.zeros(1), 3,
                         enabled=False)
    outputs = []
    for i in range(3):
        outputs.append(ahead.get(i)[0])
        ahead.start_after(i)
    assert outputs == [1, 1, 1]
    assert names == [threading.current_thread().name] * 3


def test_pipelined_long_form_equals_sequential(base_engine, shared_data):
    if not base_engine.pipeline:
        pytest.skip("the decoder shares the encoder's instance on this machine: nothing to overlap")
    from specwhisper.audio import load_audio

    path = load_audio(shared_data / "longform/longform.flac")[:16000 * 75]  # three windows: two hand-overs
    for numerics in ("single-row", "batch-invariant"):
        piped = base_engine.transcribe(path, language="en", numerics=numerics, timestamps="off")
        base_engine.pipeline = False
        try:
            sequential = base_engine.transcribe(path, language="en", numerics=numerics, timestamps="off")
        finally:
            base_engine.pipeline = True
        assert len(piped.windows) > 2
        assert piped.tokens == sequential.tokens and piped.text == sequential.text
        assert piped.timings["encoder_hidden_s"] > 0.0 == sequential.timings["encoder_hidden_s"]
