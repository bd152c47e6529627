"""Mistakes a new user makes with ``specwhisper convert``, and what converted models must still do.

Each test is one reported defect: an output folder that is (or holds) the checkpoint being
converted (with --force it deleted the checkpoint), a weights file cut short (a traceback from
safetensors), a Hugging Face folder without tokenizer files (an error about a hidden staging file),
and a converted model whose encoder variables are aliases of decoder ones (the ONNX encoder failed
with a KeyError). The checkpoints are a tiny random Whisper made here (no download), with the real
tiny.en tokenizer where one is needed; its zero biases and unit layer-norm gains are what
CTranslate2 stores once, as aliases across the whole model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from specwhisper.converters import convert
from specwhisper.errors import ModelError


@pytest.fixture(scope="module")
def hf_model(torch):
    """A random WhisperForConditionalGeneration (d_model 64, one layer a side; biases are zero,
    as transformers initializes them)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=51864, num_mel_bins=80, d_model=64, encoder_layers=1, encoder_attention_heads=4,
        decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=1500, max_target_positions=448, bos_token_id=50256, eos_token_id=50256,
        pad_token_id=50256, decoder_start_token_id=50257, init_std=0.2,
    )
    return WhisperForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def hf_bare(hf_model, tmp_path_factory):
    """The checkpoint as transformers saves it: config, generation config, safetensors; no tokenizer."""
    folder = tmp_path_factory.mktemp("hf") / "whisper-random"
    hf_model.save_pretrained(folder)
    return folder


@pytest.fixture()
def hf_folder(hf_bare, tiny_model_dir, tmp_path):
    """A private copy (tests may try to destroy it) with tiny.en's tokenizer.json."""
    folder = tmp_path / "checkpoints" / "whisper-random"
    shutil.copytree(hf_bare, folder)
    shutil.copyfile(tiny_model_dir / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def ct2_tiny(hf_bare, tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-tok") / "whisper-random"
    shutil.copytree(hf_bare, folder)
    shutil.copyfile(tiny_model_dir / "tokenizer.json", folder / "tokenizer.json")
    return convert(folder, tmp_path_factory.mktemp("ct2") / "float32", "float32")


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _no_leftovers(parent: Path) -> bool:
    return not [p.name for p in parent.iterdir() if p.name.startswith(".")]


# --- 1. an output folder that is, or holds, the source ------------------------------------------
@pytest.mark.parametrize("target", ["itself", "its parent", "a symlink to it"])
def test_hf_checkpoint_is_never_converted_over_itself(hf_folder, tmp_path, target):
    """With --force the finished output replaces the destination folder: the checkpoint went with it."""
    before = _digests(hf_folder.parent)
    out = {"itself": hf_folder, "its parent": hf_folder.parent, "a symlink to it": tmp_path / "link"}[target]
    if target == "a symlink to it":
        os.symlink(hf_folder.parent, out)
    with pytest.raises(ModelError, match="the output directory (is|contains) the source") as info:
        convert(hf_folder, out, "float32", overwrite=True)
    assert info.value.hint and str(hf_folder.resolve()) in info.value.where
    assert _digests(hf_folder.parent) == before and _no_leftovers(hf_folder.parent)


def test_openai_checkpoint_is_never_converted_into_its_folder(torch, hf_model, tiny_model_dir, tmp_path):
    from test_converters import DIMS, openai_state_dict

    folder = tmp_path / "pt"
    folder.mkdir()
    pt = folder / "tiny-random.pt"
    dims = dict(DIMS, n_audio_layer=1, n_text_layer=1)
    torch.save({"dims": dims, "model_state_dict": openai_state_dict(hf_model)}, pt)
    before = _digests(folder)
    with pytest.raises(ModelError, match="the output directory contains the source"):
        convert(pt, folder, "float32", tokenizer=tiny_model_dir, overwrite=True)
    assert _digests(folder) == before and _no_leftovers(folder)


@pytest.mark.parametrize("target", ["itself", "its parent"])
def test_ct2_model_is_never_requantized_over_itself(ct2_tiny, tmp_path, target):
    src = tmp_path / "models" / "tiny-random"
    shutil.copytree(ct2_tiny, src)
    before = _digests(src.parent)
    with pytest.raises(ModelError, match="the output directory (is|contains) the source"):
        convert(src, src if target == "itself" else src.parent, "int8", overwrite=True)
    assert _digests(src.parent) == before and _no_leftovers(src.parent)


def test_cli_refuses_converting_into_the_source_without_a_traceback(hf_folder, capsys):
    from specwhisper.cli import main

    before = _digests(hf_folder)
    assert main(["convert", str(hf_folder), "-o", str(hf_folder), "--force"]) == 2
    err = capsys.readouterr().err
    assert "is the source" in err and "Traceback" not in err
    assert _digests(hf_folder) == before


def test_an_output_folder_inside_the_source_is_allowed(hf_folder):
    """Only a destination that would replace the source is refused: one inside it leaves it whole."""
    before = _digests(hf_folder)
    out = convert(hf_folder, hf_folder / "ct2", "float32")
    assert (out / "model.bin").is_file()
    assert {k: v for k, v in _digests(hf_folder).items() if not k.startswith("ct2/")} == before


# --- 2. a weights file cut short ----------------------------------------------------------------
@pytest.mark.parametrize("keep", [0.5, 100])
def test_truncated_safetensors_names_the_file(hf_folder, tmp_path, keep):
    weights = hf_folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:int(len(data) * keep) if keep < 1 else keep])
    with pytest.raises(ModelError, match="weights file is truncated or damaged") as info:
        convert(hf_folder, tmp_path / "out", "float32")
    assert info.value.where == str(weights) and "download" in info.value.hint
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


def test_truncated_openai_checkpoint_says_so(torch, hf_model, tiny_model_dir, tmp_path):
    from test_converters import DIMS, openai_state_dict

    pt = tmp_path / "cut.pt"
    torch.save({"dims": dict(DIMS, n_audio_layer=1, n_text_layer=1),
                "model_state_dict": openai_state_dict(hf_model)}, pt)
    pt.write_bytes(pt.read_bytes()[:pt.stat().st_size // 2])
    with pytest.raises(ModelError, match="weights file is truncated or damaged") as info:
        convert(pt, tmp_path / "out", "float32", tokenizer=tiny_model_dir)
    assert info.value.where == str(pt)
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


# --- 3. no tokenizer files ----------------------------------------------------------------------
def test_hf_folder_without_tokenizer_files_asks_for_one(hf_bare, tmp_path):
    """transformers 5 builds a one-token tokenizer from nothing instead of failing."""
    with pytest.raises(ModelError, match="no tokenizer.json") as info:
        convert(hf_bare, tmp_path / "out", "float32")
    assert info.value.where == str(hf_bare) and "--tokenizer" in info.value.hint
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


# --- 4. aliases across the encoder and the decoder ----------------------------------------------
def test_read_weights_follows_aliases_out_of_its_scope(tmp_path):
    """A target outside the scope is read; an aliased int8 weight's scale follows it (as
    CTranslate2's loader does); chains are followed; aliases of nothing are dropped."""
    from specwhisper.converters.ct2_bin import ModelBinWriter
    from specwhisper.onnx_build import read_weights

    bias = np.arange(4, dtype=np.float32)
    weight, scale = np.ones((4, 4), np.int8), np.full(4, 2.0, np.float32)
    with (tmp_path / "model.bin").open("wb") as fh:
        writer = ModelBinWriter(fh, "WhisperSpec", 3, 3)
        writer.write("decoder/layer_0/ffn/linear_0/bias", bias)
        writer.write("encoder/layer_0/ffn/linear_0/weight", weight)
        writer.write("encoder/layer_0/ffn/linear_0/weight_scale", scale)
        writer.finish([("encoder/conv1/bias", "decoder/layer_0/ffn/linear_0/bias"),
                       ("decoder/layer_0/ffn/linear_1/weight", "encoder/layer_0/ffn/linear_0/weight"),
                       ("decoder/layer_0/ffn/linear_1/bias", "encoder/conv1/bias"),
                       ("encoder/ghost", "nowhere")])
    enc, dec = read_weights(tmp_path, "encoder/"), read_weights(tmp_path, "decoder/")
    np.testing.assert_array_equal(enc["encoder/conv1/bias"], bias)
    assert "encoder/ghost" not in enc and not any(k.startswith("decoder/") for k in enc)
    np.testing.assert_array_equal(dec["decoder/layer_0/ffn/linear_1/weight"], weight)
    np.testing.assert_array_equal(dec["decoder/layer_0/ffn/linear_1/weight_scale"], scale)
    np.testing.assert_array_equal(dec["decoder/layer_0/ffn/linear_1/bias"], bias)
    assert not any(k.startswith("encoder/") for k in dec)


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_onnx_encoder_of_a_converted_model_matches_ct2s(ct2_tiny, precision):
    """The converted model's encoder/conv1/bias is an alias of a decoder variable: the graph
    failed with KeyError 'encoder/conv1/bias'. Built, it is CTranslate2's encoder of the same
    precision (float32: up to summation order; int8: 0.01 off here, where CTranslate2's int8 and
    float32 differ by 0.06)."""
    ort = pytest.importorskip("onnxruntime")
    import ctranslate2

    from specwhisper.converters.ct2_bin import read_index
    from specwhisper.encoder_graph import build_encoder_graph

    aliases = dict(read_index(ct2_tiny / "model.bin").aliases)
    assert aliases.get("encoder/conv1/bias", "").startswith("decoder/")  # the case reported
    features = np.random.default_rng(0).standard_normal((1, 80, 400)).astype(np.float32)
    session = ort.InferenceSession(build_encoder_graph(ct2_tiny, precision), providers=["CPUExecutionProvider"])
    output = session.run(None, {"features": features})[0]
    model = ctranslate2.models.Whisper(str(ct2_tiny), compute_type=precision, intra_threads=2)
    reference = np.asarray(model.encode(ctranslate2.StorageView.from_array(features)))
    assert output.shape == reference.shape == (1, 200, 64)
    assert np.abs(output - reference).max() < (1e-3 if precision == "float32" else 0.03)

