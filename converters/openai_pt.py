"""OpenAI Whisper ``.pt`` checkpoints (``{"dims": ..., "model_state_dict": ...}``) -> CT2.

The state dict is renamed to the transformers layout, loaded into a
``WhisperForConditionalGeneration`` in memory and handed to CTranslate2's converter, so both
checkpoint formats share one conversion path. transformers keeps its own OpenAI converter
(models/whisper/convert_openai_to_hf.py) in its source tree only (wheels leave conversion scripts
out), so the renaming, a plain table of the two layouts, lives here. Every key must be understood:
an unknown or missing key is an error, never a silently dropped weight.

The checkpoint is read with ``torch.load(weights_only=True)``: tensors and plain containers only,
no arbitrary pickled code. OpenAI checkpoints carry no tokenizer: pass one (any Whisper model
folder or tokenizer.json with the same vocabulary) or put tokenizer.json beside the .pt file.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from specwhisper.errors import ModelError

from .ct2_export import export_whisper, load_tokenizer_json
from .hf import require_torch_stack
from .model_card import file_entries, sha256_file, write_model_card
from .staging import check_destination, staged_dir, write_json
from .weights_check import check_weights_file
from .whisper_config import OPENAI_CHECKPOINTS, suppress_ids, suppress_ids_begin

DIMS = ("n_mels", "n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
        "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer")

# OpenAI name (regex) -> transformers name; {0}, {1} are the regex groups.
_RULES: tuple[tuple[str, str], ...] = (
    (r"encoder\.conv([12])\.(weight|bias)", "model.encoder.conv{0}.{1}"),
    (r"encoder\.positional_embedding", "model.encoder.embed_positions.weight"),
    (r"encoder\.ln_post\.(weight|bias)", "model.encoder.layer_norm.{0}"),
    (r"decoder\.token_embedding\.weight", "model.decoder.embed_tokens.weight"),
    (r"decoder\.positional_embedding", "model.decoder.embed_positions.weight"),
    (r"decoder\.ln\.(weight|bias)", "model.decoder.layer_norm.{0}"),
)
_BLOCK = re.compile(r"(encoder|decoder)\.blocks\.(\d+)\.(.+)")
_BLOCK_PARTS: dict[str, str] = {
    "attn.query.weight": "self_attn.q_proj.weight", "attn.query.bias": "self_attn.q_proj.bias",
    "attn.key.weight": "self_attn.k_proj.weight",
    "attn.value.weight": "self_attn.v_proj.weight", "attn.value.bias": "self_attn.v_proj.bias",
    "attn.out.weight": "self_attn.out_proj.weight", "attn.out.bias": "self_attn.out_proj.bias",
    "attn_ln.weight": "self_attn_layer_norm.weight", "attn_ln.bias": "self_attn_layer_norm.bias",
    "cross_attn.query.weight": "encoder_attn.q_proj.weight", "cross_attn.query.bias": "encoder_attn.q_proj.bias",
    "cross_attn.key.weight": "encoder_attn.k_proj.weight",
    "cross_attn.value.weight": "encoder_attn.v_proj.weight", "cross_attn.value.bias": "encoder_attn.v_proj.bias",
    "cross_attn.out.weight": "encoder_attn.out_proj.weight", "cross_attn.out.bias": "encoder_attn.out_proj.bias",
    "cross_attn_ln.weight": "encoder_attn_layer_norm.weight", "cross_attn_ln.bias": "encoder_attn_layer_norm.bias",
    "mlp.0.weight": "fc1.weight", "mlp.0.bias": "fc1.bias",
    "mlp.2.weight": "fc2.weight", "mlp.2.bias": "fc2.bias",
    "mlp_ln.weight": "final_layer_norm.weight", "mlp_ln.bias": "final_layer_norm.bias",
}
_IGNORED = ("alignment_heads",)  # a buffer some re-saved checkpoints keep; read separately


def hf_key(key: str) -> str | None:
    """The transformers name of an OpenAI state-dict key, or None when the key is unknown."""
    for pattern, target in _RULES:
        m = re.fullmatch(pattern, key)
        if m:
            return target.format(*m.groups())
    m = _BLOCK.fullmatch(key)
    if m and m.group(3) in _BLOCK_PARTS:
        side, index, part = m.groups()
        if side == "encoder" and part.startswith("cross_attn"):
            return None
        return f"model.{side}.layers.{index}.{_BLOCK_PARTS[part]}"
    return None


def load_checkpoint(path: Path) -> tuple[dict[str, int], dict[str, Any]]:
    """Read ``dims`` and ``model_state_dict`` safely; anything else is a clear ModelError."""
    import pickle

    import torch

    try:
        ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelError("checkpoint file not found", where=str(path), hint="check the path") from None
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        if found or (zipfile.is_zipfile(path) and "Weights only load failed" in str(exc)):
            what = f" ({found.group(1)})" if found else ""
            raise ModelError(f"checkpoint holds objects other than tensors{what}; refusing to unpickle it, "
                             "since that could run code", where=str(path),
                             hint="use an original OpenAI Whisper .pt file (tensors and plain values only)") from None
        raise ModelError("not a readable PyTorch checkpoint", where=str(path),
                         hint="re-download the .pt file; for a Hugging Face model pass its folder") from None
    except Exception as exc:  # torch raises RuntimeError, EOFError, zipfile errors... for broken files
        check_weights_file(path)  # a file cut short says so, not "failed finding central directory"
        raise ModelError(f"not a readable PyTorch checkpoint ({type(exc).__name__}: {str(exc)[:200]})",
                         where=str(path),
                         hint="re-download the .pt file; for a Hugging Face model pass its folder") from None
    if not isinstance(ckpt, dict) or "dims" not in ckpt or "model_state_dict" not in ckpt:
        keys = sorted(ckpt)[:6] if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ModelError(f"not an OpenAI Whisper checkpoint (expected 'dims' and 'model_state_dict', found {keys})",
                         where=str(path), hint="pass an original OpenAI .pt file, or a Hugging Face folder")
    dims = ckpt["dims"]
    missing = [d for d in DIMS if not isinstance(dims, dict) or not isinstance(dims.get(d), int)]
    if missing:
        raise ModelError(f"checkpoint 'dims' lacks {missing}", where=str(path),
                         hint="use an original OpenAI Whisper .pt file")
    return {d: int(dims[d]) for d in DIMS}, ckpt["model_state_dict"]


def rename_state_dict(state: dict[str, Any], where: str) -> tuple[dict[str, Any], Any]:
    """OpenAI keys -> transformers keys; returns (renamed dict, alignment_heads buffer or None)."""
    out: dict[str, Any] = {}
    unknown = []
    for key, value in state.items():
        if key in _IGNORED:
            continue
        target = hf_key(key)
        if target is None:
            unknown.append(key)
        else:
            out[target] = value
    if unknown:
        shown = ", ".join(repr(k) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ModelError(f"unknown key(s) in the OpenAI state dict: {shown}", where=where,
                         hint="this is not a standard Whisper checkpoint (a fine-tune with extra layers?); "
                              "convert it to a transformers folder first")
    return out, state.get("alignment_heads")


def build_hf_model(dims: dict[str, int], state: dict[str, Any], tok_path: Path, where: str):
    """A WhisperForConditionalGeneration holding exactly the checkpoint's weights."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    if dims["n_audio_state"] != dims["n_text_state"]:
        raise ModelError("encoder and decoder widths differ; transformers' Whisper needs one d_model",
                         where=where, hint="this checkpoint cannot go through the transformers layout")
    tok = load_tokenizer_json(tok_path)
    renamed, heads = rename_state_dict(state, where)
    fc1 = renamed.get("model.encoder.layers.0.fc1.weight")
    dfc1 = renamed.get("model.decoder.layers.0.fc1.weight")
    eot, sot = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|startoftranscript|>")
    config = WhisperConfig(
        vocab_size=dims["n_vocab"], num_mel_bins=dims["n_mels"], d_model=dims["n_audio_state"],
        encoder_layers=dims["n_audio_layer"], encoder_attention_heads=dims["n_audio_head"],
        decoder_layers=dims["n_text_layer"], decoder_attention_heads=dims["n_text_head"],
        encoder_ffn_dim=int(fc1.shape[0]) if fc1 is not None else 4 * dims["n_audio_state"],
        decoder_ffn_dim=int(dfc1.shape[0]) if dfc1 is not None else 4 * dims["n_text_state"],
        max_source_positions=dims["n_audio_ctx"], max_target_positions=dims["n_text_ctx"],
        bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, decoder_start_token_id=sot,
        suppress_tokens=suppress_ids(tok), begin_suppress_tokens=suppress_ids_begin(tok),
    )
    renamed["proj_out.weight"] = renamed.get("model.decoder.embed_tokens.weight")
    renamed = {k: v.float() for k, v in renamed.items() if v is not None}
    model = WhisperForConditionalGeneration(config)
    expected = set(model.state_dict())
    missing = sorted(expected - set(renamed))
    if missing:
        raise ModelError(f"checkpoint lacks weights: {missing[:5]}", where=where,
                         hint="the .pt file is incomplete or not a Whisper checkpoint")
    try:
        with torch.no_grad():
            model.load_state_dict(renamed, strict=True)
    except RuntimeError as exc:
        raise ModelError(f"checkpoint weights do not fit its dims: {str(exc)[:400]}", where=where,
                         hint="the .pt file is corrupt or its 'dims' are wrong") from None
    model.eval()
    return model, config, heads


def find_tokenizer(pt_path: Path, tokenizer: str | Path | None) -> Path:
    candidates = [Path(tokenizer).expanduser()] if tokenizer else [pt_path.parent]
    for c in candidates:
        p = c / "tokenizer.json" if c.is_dir() else c
        if p.is_file():
            return p
    raise ModelError("OpenAI checkpoints carry no tokenizer", where=str(pt_path),
                     hint="pass --tokenizer DIR_OR_FILE (the tokenizer.json of any Whisper model with the same "
                          "vocabulary, e.g. a tiny.en folder for *.en checkpoints, base for multilingual ones), "
                          "or put tokenizer.json beside the .pt file")


def convert_openai(source: str | Path, out_dir: str | Path, quantization: str = "int8", *,
                   overwrite: bool = False, tokenizer: str | Path | None = None) -> Path:
    """Convert an OpenAI Whisper ``.pt`` checkpoint into a CT2 directory ``out_dir``."""
    require_torch_stack()
    pt = Path(source).expanduser()
    check_destination(Path(out_dir).expanduser().absolute(), overwrite, pt)  # before the slow load, not after
    tok_path = find_tokenizer(pt, tokenizer)
    digest = sha256_file(pt)
    name = OPENAI_CHECKPOINTS.get(digest)
    dims, state = load_checkpoint(pt)
    model, config, heads_buffer = build_hf_model(dims, state, tok_path, str(pt))
    del state
    checkpoint_heads = None
    if heads_buffer is not None and getattr(heads_buffer, "ndim", 0) == 2:
        checkpoint_heads = [[int(a), int(b)] for a, b in heads_buffer.to_dense().nonzero().tolist()]
    with staged_dir(out_dir, overwrite, source=pt) as tmp, tempfile.TemporaryDirectory(prefix="specwhisper-hfcfg-") as cfg_dir:
        config.save_pretrained(cfg_dir)  # only config.json: the weights stay in memory
        cfg = export_whisper(Path(cfg_dir), tmp, quantization, tok_path, model=model, checkpoint_name=name)
        if checkpoint_heads and not name:
            cfg["alignment_heads"] = checkpoint_heads
            write_json(tmp / "config.json", cfg)
        inputs = [{"name": str(pt), "bytes": pt.stat().st_size, "sha256": digest}, *file_entries([tok_path])]
        write_model_card(tmp, source={"kind": "openai", "path": str(pt.absolute()), "checkpoint": name},
                         inputs=inputs, quantization=quantization, extra={"dims": dims},
                         libraries=("torch", "transformers"))
    return Path(out_dir).expanduser().absolute()
