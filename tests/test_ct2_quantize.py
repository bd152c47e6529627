"""CT2 float16 -> int8 re-encoding in numpy: same numbers as CTranslate2's own int8 quantization.

The decisive check: a float16 model loaded with compute_type="int8" and our int8 file loaded the
same way give bit-identical encoder outputs and identical greedy tokens on real clips.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from conftest import load_manifest
from specwhisper.converters import quantize_ct2_model
from specwhisper.converters.ct2_bin import read_index
from specwhisper.converters.model_card import sha256_file
from specwhisper.converters.quantize import quantize_int8, requantize_model_bin
from specwhisper.errors import ModelError

ctranslate2 = pytest.importorskip("ctranslate2")


def test_quantize_int8_matches_ctranslate2_spec_quantizer():
    """Same int8 values and scales as CTranslate2's converter (LayerSpec._quantize), incl. zero rows and ties."""
    from ctranslate2.specs import common_spec

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((37, 129)) * rng.uniform(0.01, 3, (37, 1))).astype(np.float16).astype(np.float32)
    w[3] = 0.0  # all-zero row: scale 1
    w[5, :4] = [127.0, 0.5, 1.5, -2.5]  # scale exactly 1, so half-way values test round-half-even
    w[5, 4:] = 0.25
    spec = common_spec.LinearSpec()
    spec.weight = w.copy()
    spec.validate()
    spec._quantize("int8")
    q, scale = quantize_int8(w)
    np.testing.assert_array_equal(q, spec.weight.numpy())
    np.testing.assert_array_equal(scale, spec.weight_scale.numpy())
    assert q.dtype == np.int8 and scale.dtype == np.float32
    assert scale[3] == 1.0 and list(q[5, :4]) == [127, 0, 2, -2]


@pytest.fixture(scope="module")
def tiny_int8(tiny_model_dir, tmp_path_factory):
    return quantize_ct2_model(tiny_model_dir, tmp_path_factory.mktemp("q") / "tiny-int8")


def test_int8_copy_is_half_size_with_card(tiny_model_dir, tiny_int8):
    src, dst = tiny_model_dir / "model.bin", tiny_int8 / "model.bin"
    assert dst.stat().st_size < 0.56 * src.stat().st_size
    index = read_index(dst)
    dtypes = {v.name: v.dtype for v in index.variables}
    assert dtypes["decoder/embeddings/weight"] == "int8" and dtypes["decoder/embeddings/weight_scale"] == "float32"
    assert dtypes["encoder/conv1/weight"] != "int8"  # kept in float on purpose (oneDNN builds keep conv in float)
    assert index.aliases == read_index(src).aliases
    card = json.loads((tiny_int8 / "model_card.json").read_text())
    assert card["quantization"] == "int8" and card["source"]["kind"] == "ct2"
    assert {i["name"]: i["sha256"] for i in card["inputs"]}["model.bin"] == sha256_file(src)
    assert {o["name"]: o["sha256"] for o in card["outputs"]}["model.bin"] == sha256_file(dst)
    for name in ("config.json", "tokenizer.json"):
        assert (tiny_int8 / name).read_bytes() == (tiny_model_dir / name).read_bytes()


def test_reencoding_is_exact_where_nothing_changes(tiny_model_dir, tiny_int8, tmp_path):
    """float16 -> float16 rewrites the source byte for byte; int8 -> int8 rewrites our int8 file byte for byte."""
    requantize_model_bin(tiny_model_dir / "model.bin", tmp_path / "same.bin", "float16")
    assert sha256_file(tmp_path / "same.bin") == sha256_file(tiny_model_dir / "model.bin")
    requantize_model_bin(tiny_int8 / "model.bin", tmp_path / "again.bin", "int8")
    assert sha256_file(tmp_path / "again.bin") == sha256_file(tiny_int8 / "model.bin")


def _clips(shared_data, n=5):
    rows = load_manifest(shared_data / "real" / "manifest.jsonl")
    sentences = [r for r in rows if r.get("kind") == "sentence"] or rows
    return sentences[:n]


def _features(path, n_mels):
    import soundfile as sf

    from specwhisper.features import log_mel_spectrogram, window_features

    audio, sr = sf.read(path, dtype="float32")
    assert sr == 16000
    return window_features(log_mel_spectrogram(audio, n_mels), 0)[None]


@pytest.mark.parametrize("model", ["tiny", pytest.param("base", marks=pytest.mark.full)])  # base: 8 s more
def test_int8_file_decodes_exactly_like_float16_loaded_as_int8(model, request, shared_data, tmp_path):
    from specwhisper.tokenizer import WhisperTokenizer

    src = request.getfixturevalue(f"{model}_model_dir")
    dst = quantize_ct2_model(src, tmp_path / "int8")
    tok = WhisperTokenizer.from_model_dir(src)
    prompt = tok.sot_sequence("en")
    ref = ctranslate2.models.Whisper(str(src), device="cpu", compute_type="int8", intra_threads=2)
    ours = ctranslate2.models.Whisper(str(dst), device="cpu", compute_type="int8", intra_threads=2)
    texts = []
    for clip in _clips(shared_data, 4 if model == "tiny" else 2):
        feats = ctranslate2.StorageView.from_array(_features(clip["path"], ref.n_mels))
        enc_ref, enc_ours = ref.encode(feats), ours.encode(feats)
        np.testing.assert_array_equal(np.array(enc_ours), np.array(enc_ref))
        # generate() takes the encoder output directly, so each model decodes from its own encoding
        a = ref.generate(enc_ref, [prompt], beam_size=1)[0].sequences_ids[0]
        b = ours.generate(enc_ours, [prompt], beam_size=1)[0].sequences_ids[0]
        assert b == a, clip["audio"]
        texts.append(tok.decode(a))
    assert sum(len(t.split()) for t in texts) > 12  # real speech was decoded, not empty windows


def _corrupt_copy(src, dst, mutate):
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file() and p.name != "model.bin":
            (dst / p.name).write_bytes(p.read_bytes())
    data = bytearray((src / "model.bin").read_bytes()[:4096])
    (dst / "model.bin").write_bytes(mutate(data))
    return dst


@pytest.mark.parametrize("mutate, message", [
    (lambda d: bytes(d[:3000]), "truncated"),
    (lambda d: struct.pack("<I", 99) + bytes(d[4:]), "binary version 99"),
    (lambda d: b"", "empty"),
])
def test_corrupt_model_bin_gives_clear_error_and_no_output(tiny_model_dir, tmp_path, mutate, message):
    bad = _corrupt_copy(tiny_model_dir, tmp_path / "bad", mutate)
    with pytest.raises(ModelError, match=message) as info:
        quantize_ct2_model(bad, tmp_path / "out")
    assert info.value.hint
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]  # no temporary folder left behind


def test_refuses_to_overwrite_and_unknown_quantization(tiny_model_dir, tiny_int8, tmp_path):
    with pytest.raises(ModelError, match="not empty"):
        quantize_ct2_model(tiny_model_dir, tiny_int8)
    with pytest.raises(ModelError, match="unknown quantization"):
        quantize_ct2_model(tiny_model_dir, tmp_path / "x", "int4")
    with pytest.raises(ModelError, match="no model.bin"):
        quantize_ct2_model(tmp_path, tmp_path / "y")
