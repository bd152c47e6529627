"""Checkpoint conversion (Hugging Face folder, OpenAI .pt), vocabulary remap tables, the convert CLI.

The conversion tests build a tiny random Whisper locally with transformers (no download): the real
tiny.en tokenizer (CTranslate2 needs Whisper's control tokens), vocab 51864, d_model 64, 2 layers.
Tests that need torch/transformers skip without them (the ``convert`` extra).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from specwhisper.converters import build_vocab_map, convert, detect_source, load_vocab_map, vocab_map_path
from specwhisper.converters.model_card import sha256_file
from specwhisper.errors import ModelError, TokenMapError
from specwhisper.tokenizer import WhisperTokenizer

N_STEPS = 12


# --- a tiny random Whisper in both checkpoint formats -----------------------------------------
@pytest.fixture(scope="module")
def hf_tiny(torch, tiny_model_dir, tmp_path_factory):
    """(folder, model): a random WhisperForConditionalGeneration saved as a transformers folder."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=51864, num_mel_bins=80, d_model=64, encoder_layers=2, encoder_attention_heads=4,
        decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=1500, max_target_positions=448, bos_token_id=50256, eos_token_id=50256,
        pad_token_id=50256, decoder_start_token_id=50257, init_std=0.2,  # wide logits: no near-ties
    )
    model = WhisperForConditionalGeneration(config).eval()
    folder = tmp_path_factory.mktemp("hf") / "whisper-tiny-random"
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_bytes((tiny_model_dir / "tokenizer.json").read_bytes())
    return folder, model


def openai_state_dict(model) -> dict:
    """The model's weights under OpenAI's names (whisper/model.py layout), written out independently."""
    sd, cfg = model.state_dict(), model.config
    out = {}

    def put(openai, hf, bias=True):
        out[f"{openai}.weight"] = sd[f"{hf}.weight"]
        if bias:
            out[f"{openai}.bias"] = sd[f"{hf}.bias"]

    put("encoder.conv1", "model.encoder.conv1")
    put("encoder.conv2", "model.encoder.conv2")
    out["encoder.positional_embedding"] = sd["model.encoder.embed_positions.weight"]
    out["decoder.positional_embedding"] = sd["model.decoder.embed_positions.weight"]
    out["decoder.token_embedding.weight"] = sd["model.decoder.embed_tokens.weight"]
    put("encoder.ln_post", "model.encoder.layer_norm")
    put("decoder.ln", "model.decoder.layer_norm")
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(layers):
            o, h = f"{side}.blocks.{i}", f"model.{side}.layers.{i}"
            attns = [("attn", "self_attn")] + ([("cross_attn", "encoder_attn")] if side == "decoder" else [])
            for oa, ha in attns:
                put(f"{o}.{oa}.query", f"{h}.{ha}.q_proj")
                put(f"{o}.{oa}.key", f"{h}.{ha}.k_proj", bias=False)
                put(f"{o}.{oa}.value", f"{h}.{ha}.v_proj")
                put(f"{o}.{oa}.out", f"{h}.{ha}.out_proj")
                put(f"{o}.{oa}_ln", f"{h}.{ha}_layer_norm")
            put(f"{o}.mlp.0", f"{h}.fc1")
            put(f"{o}.mlp.2", f"{h}.fc2")
            put(f"{o}.mlp_ln", f"{h}.final_layer_norm")
    return out


DIMS = dict(n_mels=80, n_vocab=51864, n_audio_ctx=1500, n_audio_state=64, n_audio_head=4, n_audio_layer=2,
            n_text_ctx=448, n_text_state=64, n_text_head=4, n_text_layer=2)


@pytest.fixture(scope="module")
def ct2_f32(hf_tiny, tmp_path_factory):
    return convert(hf_tiny[0], tmp_path_factory.mktemp("ct2") / "f32", "float32")


@pytest.fixture(scope="module")
def features():
    return np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)


def ct2_greedy(model_dir, features, compute_type):
    import ctranslate2

    m = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type=compute_type, intra_threads=2)
    sv = ctranslate2.StorageView.from_array(features)
    res = m.generate(sv, [[50257, 50362]], beam_size=1, max_length=2 * N_STEPS + 2, suppress_blank=False,
                     suppress_tokens=[], return_scores=True)[0]
    return np.array(m.encode(sv)), res.sequences_ids[0], res.scores[0]


def hf_greedy(torch, model, features, steps):
    """transformers' greedy tokens, the sum of their log-probs and the smallest top-1 margin."""
    with torch.no_grad():
        enc = model.model.encoder(torch.from_numpy(features)).last_hidden_state
        ids, out, logprob, margin = torch.tensor([[50257, 50362]]), [], 0.0, np.inf
        for _ in range(steps):
            logits = model(encoder_outputs=(enc,), decoder_input_ids=ids).logits[0, -1]
            top2 = logits.topk(2).values
            nxt = int(logits.argmax())
            margin = min(margin, float(top2[0] - top2[1]))
            logprob += float(torch.log_softmax(logits, -1)[nxt])
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
    return enc.numpy(), out, logprob, margin


# --- Hugging Face -> CT2 ----------------------------------------------------------------------
def test_hf_float32_matches_transformers_greedy(torch, hf_tiny, ct2_f32, features):
    enc, tokens, score = ct2_greedy(ct2_f32, features, "float32")
    hf_enc, hf_tokens, hf_logprob, margin = hf_greedy(torch, hf_tiny[1], features, len(tokens))
    assert len(tokens) >= N_STEPS - 2
    np.testing.assert_allclose(enc, hf_enc, atol=2e-4, rtol=1e-4)
    assert margin > 1e-3  # the comparison of argmaxes is meaningful
    assert tokens == hf_tokens
    assert score == pytest.approx(hf_logprob / len(tokens), abs=1e-3)  # CT2 reports the mean log-prob


def test_hf_conversion_writes_ct2_config_tokenizer_and_card(hf_tiny, ct2_f32, tiny_model_dir):
    config = json.loads((ct2_f32 / "config.json").read_text())
    reference = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["suppress_ids"] == reference["suppress_ids"]  # derived from the tokenizer like OpenAI's
    assert config["suppress_ids_begin"] == reference["suppress_ids_begin"]
    assert config["alignment_heads"] == [[1, h] for h in range(4)]  # upper half of the decoder
    assert (ct2_f32 / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()
    assert json.loads((ct2_f32 / "preprocessor_config.json").read_text())["feature_size"] == 80
    assert len(json.loads((ct2_f32 / "vocabulary.json").read_text())) == 51864
    card = json.loads((ct2_f32 / "model_card.json").read_text())
    inputs = {os.path.basename(i["name"]): i["sha256"] for i in card["inputs"]}
    assert inputs["model.safetensors"] == sha256_file(hf_tiny[0] / "model.safetensors")
    assert card["quantization"] == "float32" and card["source"]["kind"] == "huggingface"
    assert card["converter"]["version"] >= 1 and "ctranslate2" in json.dumps(card["converter"]["libraries"])
    assert WhisperTokenizer.from_model_dir(ct2_f32).special.eot == 50256


def test_hf_int8_runs_and_stays_close(hf_tiny, ct2_f32, features, tmp_path):
    """The int8 file behaves as CTranslate2's own int8 quantization of the float32 model: how far
    int8 lands from float32 depends on the CPU's int8 kernels (0.11 mean relative error on an
    AVX2-only EPYC, under 0.05 with AVX-512), so the yardstick is CT2 quantizing at load, run
    on the same kernels."""
    out = convert(hf_tiny[0], tmp_path / "int8", "int8")
    assert (out / "model.bin").stat().st_size < 0.5 * (ct2_f32 / "model.bin").stat().st_size
    enc32, tok32, _ = ct2_greedy(ct2_f32, features, "float32")
    enc8, tok8, _ = ct2_greedy(out, features, "int8")
    ref8, ref_tok8, _ = ct2_greedy(ct2_f32, features, "int8")  # CT2 quantizes the float32 weights at load
    rel = np.abs(enc8 - enc32).mean() / np.abs(enc32).mean()
    rel_ct2 = np.abs(ref8 - enc32).mean() / np.abs(enc32).mean()
    drift = np.abs(enc8 - ref8).mean() / np.abs(enc32).mean()
    print(f"int8 vs float32: encoder mean rel. error {rel:.4f} (CT2's own int8: {rel_ct2:.4f}; between the two "
          f"{drift:.4f}); greedy tokens {tok8[:8]} vs CT2's int8 {ref_tok8[:8]}")
    assert rel < 0.2  # int8 at all: a broken scale or transposed weight gives errors of order 1
    assert drift <= 0.1 * rel_ct2 + 1e-6  # the same quantization as CT2's, up to rounding
    assert tok8 == ref_tok8


# --- OpenAI .pt -> CT2 ------------------------------------------------------------------------
def test_openai_checkpoint_round_trip_equals_hf_conversion(torch, hf_tiny, ct2_f32, tiny_model_dir, tmp_path):
    pt = tmp_path / "tiny-random.pt"
    torch.save({"dims": DIMS, "model_state_dict": openai_state_dict(hf_tiny[1])}, pt)
    assert detect_source(pt) == "openai"
    out = convert(pt, tmp_path / "from-openai", "float32", tokenizer=tiny_model_dir)
    assert sha256_file(out / "model.bin") == sha256_file(ct2_f32 / "model.bin")  # same weights, same file
    assert json.loads((out / "config.json").read_text()) == json.loads((ct2_f32 / "config.json").read_text())
    card = json.loads((out / "model_card.json").read_text())
    assert card["source"]["kind"] == "openai" and card["inputs"][0]["sha256"] == sha256_file(pt)
    assert card["dims"] == DIMS


def _no_leftovers(parent):
    return not [p.name for p in parent.iterdir() if p.name.startswith(".")]


def test_openai_unknown_or_missing_key_is_a_clear_error(torch, hf_tiny, tiny_model_dir, tmp_path):
    sd = openai_state_dict(hf_tiny[1])
    extra = dict(sd, **{"decoder.blocks.0.adapter.weight": torch.zeros(2, 2)})
    torch.save({"dims": DIMS, "model_state_dict": extra}, tmp_path / "extra.pt")
    with pytest.raises(ModelError, match=r"unknown key.*decoder\.blocks\.0\.adapter\.weight"):
        convert(tmp_path / "extra.pt", tmp_path / "out", tokenizer=tiny_model_dir)
    sd.pop("decoder.ln.bias")
    torch.save({"dims": DIMS, "model_state_dict": sd}, tmp_path / "missing.pt")
    with pytest.raises(ModelError, match="lacks weights"):
        convert(tmp_path / "missing.pt", tmp_path / "out", tokenizer=tiny_model_dir)
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


class NotATensor:
    pass


@pytest.mark.parametrize("kind, message", [
    ("garbage", "not a readable PyTorch checkpoint"),
    ("not_whisper", "not an OpenAI Whisper checkpoint"),
    ("pickled_object", "objects other than tensors .*NotATensor"),
    ("bad_dims", "'dims' lacks"),
])
def test_openai_bad_files_are_refused(torch, tiny_model_dir, tmp_path, kind, message):
    pt = tmp_path / "x.pt"
    if kind == "garbage":
        pt.write_bytes(b"\x80\x02garbage" * 200)
    elif kind == "not_whisper":
        torch.save({"state_dict": {}}, pt)
    elif kind == "pickled_object":
        torch.save({"dims": DIMS, "model_state_dict": {}, "extra": NotATensor()}, pt)
    else:
        torch.save({"dims": {"n_mels": 80}, "model_state_dict": {}}, pt)
    with pytest.raises(ModelError, match=message) as info:
        convert(pt, tmp_path / "out", tokenizer=tiny_model_dir)
    assert info.value.hint
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


def test_openai_needs_a_matching_tokenizer(torch, hf_tiny, base_model_dir, tmp_path):
    pt = tmp_path / "m.pt"
    torch.save({"dims": DIMS, "model_state_dict": openai_state_dict(hf_tiny[1])}, pt)
    with pytest.raises(ModelError, match="carry no tokenizer"):
        convert(pt, tmp_path / "out")
    with pytest.raises(ModelError, match="does not match the checkpoint"):
        convert(pt, tmp_path / "out", tokenizer=base_model_dir)  # multilingual tokenizer, English model
    assert not (tmp_path / "out").exists() and _no_leftovers(tmp_path)


def test_hub_id_without_network_is_a_network_error(torch, tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from specwhisper.errors import NetworkError

    def offline(*args, **kwargs):
        raise OSError("no route to host")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert detect_source("openai/whisper-tiny.en") == "huggingface"
    with pytest.raises(NetworkError, match="cannot fetch 'openai/whisper-tiny.en'"):
        convert("openai/whisper-tiny.en", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- sources, destinations, CLI (no torch needed) ---------------------------------------------
def test_unknown_sources_and_occupied_destinations(tiny_model_dir, tmp_path):
    with pytest.raises(ModelError, match="not found"):
        convert(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="neither"):
        convert(tmp_path / "empty", tmp_path / "out")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(ModelError, match="not empty"):
        convert(tiny_model_dir, occupied, "int8")
    assert (occupied / "keep.txt").read_text() == "mine"
    out = convert(tiny_model_dir, occupied, "int8", overwrite=True)
    assert {"config.json", "model.bin", "model_card.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert not (occupied / "keep.txt").exists() and _no_leftovers(tmp_path)


def test_cli_convert_with_draft_map(base_model_dir, tiny_model_dir, tmp_path, capsys):
    from specwhisper.cli import main

    out = tmp_path / "base-int8"
    assert main(["convert", str(base_model_dir), "-o", str(out), "--draft-map", str(tiny_model_dir)]) == 0
    printed = capsys.readouterr().out
    assert "text tokens" in printed and "specials: all mapped" in printed
    draft_tok = WhisperTokenizer.from_model_dir(tiny_model_dir)
    path = vocab_map_path(out, draft_tok.fingerprint())
    vm = load_vocab_map(path, WhisperTokenizer.from_model_dir(out), draft_tok)
    assert vm.draft_to_main[draft_tok.special.eot] == 50257
    card = json.loads((out / "model_card.json").read_text())
    assert path.name in {o["name"] for o in card["outputs"]} and path.name in card["vocab_maps"]
    assert main(["convert", str(base_model_dir), "-o", str(out)]) == 2  # exists: clean error, no traceback
    assert "already exists" in capsys.readouterr().err


# --- vocabulary remap tables ------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab(base_model_dir, tiny_model_dir):
    main_tok = WhisperTokenizer.from_model_dir(base_model_dir)
    draft_tok = WhisperTokenizer.from_model_dir(tiny_model_dir)
    return build_vocab_map(base_model_dir, tiny_model_dir, sample_text="Turn on the kitchen lights, please."), \
        main_tok, draft_tok


def test_vocab_map_maps_specials_by_meaning(vocab):
    vm, main, draft = vocab
    ms, ds = main.special, draft.special
    for name in ("eot", "sot", "transcribe", "translate", "no_timestamps", "sot_prev", "timestamp_begin"):
        d, m = getattr(ds, name), getattr(ms, name)
        assert (vm.draft_to_main[d], vm.main_to_draft[m]) == (m, d), name
    assert vm.draft_to_main[draft.vocab_size - 1] == main.vocab_size - 1  # <|30.00|>
    assert vm.main_to_draft[main.language_token("en")] == draft.token_to_id("<|en|>")
    assert vm.main_to_draft[main.language_token("he")] == draft.token_to_id("<|iw|>")  # same token, old code
    assert all(vm.stats["specials_mapped"].values())


def test_vocab_map_text_tokens_spell_the_same_bytes(vocab):
    vm, main, draft = vocab
    text = draft.special.eot
    mapped = np.flatnonzero(vm.draft_to_main[:text] >= 0)
    assert len(mapped) == vm.stats["draft_text_mapped"] and 0.4 < vm.stats["draft_text_coverage"] < 1.0
    assert np.all(vm.draft_to_main[:text][vm.draft_to_main[:text] >= 0] < main.special.eot)  # text -> text only
    assert np.all(vm.main_to_draft[vm.draft_to_main[mapped]] == mapped)  # a bijection on what maps
    for d in mapped[:: max(1, len(mapped) // 400)]:
        assert main.token_text(int(vm.draft_to_main[d])) == draft.token_text(int(d))
    ids = draft.encode(" The weather today is lovely.")
    assert main.decode(vm.map_draft(ids)) == " The weather today is lovely."
    unmapped = int(np.flatnonzero(vm.draft_to_main[:text] < 0)[0])
    assert main.token_to_id(draft.token_text(unmapped)) is None
    assert vm.stats["sample_coverage"] > 0.8


def test_vocab_map_file_is_checked_against_both_tokenizers(vocab, tmp_path):
    vm, main, draft = vocab
    path = vm.save(tmp_path / "map.npz")
    with np.load(path, allow_pickle=False) as data:  # plain arrays only
        assert set(data.files) >= {"draft_to_main", "main_to_draft", "main_fingerprint", "draft_fingerprint", "stats"}
    loaded = load_vocab_map(path, main, draft)
    np.testing.assert_array_equal(loaded.draft_to_main, vm.draft_to_main)
    assert loaded.stats == vm.stats
    swapped = load_vocab_map(path, draft, main)  # roles exchanged: same tables, exchanged
    np.testing.assert_array_equal(swapped.draft_to_main, vm.main_to_draft)
    with pytest.raises(TokenMapError, match="other tokenizers"):
        load_vocab_map(path, main, main)
    (tmp_path / "bad.npz").write_bytes(b"not a zip file")
    with pytest.raises(TokenMapError, match="cannot be read"):
        load_vocab_map(tmp_path / "bad.npz", main, draft)
    with pytest.raises(TokenMapError, match="not found"):
        load_vocab_map(tmp_path / "absent.npz", main, draft)


@pytest.mark.parametrize("damage", ["no tokenizer.json", "config.json not JSON"])
def test_a_ct2_source_that_would_not_load_is_refused_before_writing(tiny_model_dir, tmp_path, damage):
    """Its copy would not load either, and the loader's advice (convert it) leads back here."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(tiny_model_dir, src)
    if damage == "no tokenizer.json":
        (src / "tokenizer.json").unlink()
    else:
        (src / "config.json").write_text("{broken")
    with pytest.raises(ModelError, match="cannot convert") as info:
        convert(src, tmp_path / "out", "int8")
    assert "restore" in info.value.hint and not (tmp_path / "out").exists()
