"""Checkpoints -> CTranslate2 model directories, int8 re-encoding, and cross-vocabulary remap tables.

    from specwhisper.converters import convert, quantize_ct2_model, build_vocab_map, load_vocab_map
    convert("openai/whisper-tiny.en", "models/tiny.en")           # HF hub id or folder (needs [convert])
    convert("tiny.en.pt", "models/tiny.en", tokenizer="models/x") # OpenAI checkpoint (needs [convert])
    quantize_ct2_model("models/base-fp16", "models/base-int8")     # CT2 float16 -> int8, numpy only
    convert("models/base", "out/base", draft_map="tiny.en")        # + remap tables for a tiny.en drafter

Every output directory appears whole or not at all and carries a ``model_card.json``.
"""

from __future__ import annotations

import re
from pathlib import Path

from specwhisper.errors import ModelError

from .quantize import QUANTIZATIONS, quantize_ct2_model
from .vocab_map import VocabMap, build_vocab_map, load_vocab_map, vocab_map_path, write_vocab_map

__all__ = [
    "QUANTIZATIONS",
    "VocabMap",
    "build_vocab_map",
    "convert",
    "detect_source",
    "load_vocab_map",
    "quantize_ct2_model",
    "resolve_model_dir",
    "vocab_map_path",
    "write_vocab_map",
]

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def detect_source(source: str | Path) -> str:
    """Kind of ``source``: 'ct2' (model.bin folder), 'huggingface' (folder or hub id) or 'openai' (.pt file)."""
    from .hf import is_hf_folder

    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "model.bin").is_file():
            return "ct2"
        if is_hf_folder(path):
            return "huggingface"
        raise ModelError("folder is neither a CTranslate2 model (model.bin) nor a Hugging Face Whisper checkpoint",
                         where=str(path), hint="pass a CT2 folder, a transformers Whisper folder, or an OpenAI .pt")
    if path.is_file():
        if path.name == "model.bin" and (path.parent / "config.json").is_file():
            return "ct2"
        return "openai"
    if _HUB_ID.fullmatch(str(source)) and not str(source).startswith((".", "/", "~")):
        return "huggingface"
    raise ModelError("conversion source not found", where=str(source),
                     hint="pass an existing folder or file, or a Hugging Face hub id such as openai/whisper-tiny.en")


def resolve_model_dir(name_or_path: str | Path) -> Path:
    """A model folder, or a model-store name such as 'tiny.en' (pulled if needed)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    from specwhisper.model_store import resolve_model

    return Path(resolve_model(str(name_or_path)))


def convert(source: str | Path, out_dir: str | Path, quantization: str = "int8",
            draft_map: str | Path | None = None, *, tokenizer: str | Path | None = None,
            overwrite: bool = False) -> Path:
    """Convert ``source`` into a CT2 model directory ``out_dir`` and return its path.

    ``source`` is a CT2 folder (re-encoded to ``quantization``), a Hugging Face Whisper folder or
    hub id, or an OpenAI ``.pt`` checkpoint (``tokenizer`` names a tokenizer.json or a model folder
    with one; default: tokenizer.json beside the file). ``draft_map`` names a second model (folder or
    store name): remap tables between the two vocabularies are stored in ``out_dir``.
    """
    from .quantize import check_quantization

    check_quantization(quantization)
    kind = detect_source(source)
    draft_dir = None
    if draft_map is not None:
        from specwhisper.tokenizer import WhisperTokenizer

        draft_dir = resolve_model_dir(draft_map)
        WhisperTokenizer.from_model_dir(draft_dir)  # fail before the long conversion, not after
    if kind == "ct2":
        src = Path(source).expanduser()
        out = quantize_ct2_model(src.parent if src.is_file() else src, out_dir, quantization, overwrite=overwrite)
    elif kind == "huggingface":
        from .hf import convert_hf

        out = convert_hf(source, out_dir, quantization, overwrite=overwrite, tokenizer=tokenizer)
    else:
        from .openai_pt import convert_openai

        out = convert_openai(source, out_dir, quantization, overwrite=overwrite, tokenizer=tokenizer)
    if draft_dir is not None:
        from .model_card import record_extra_output

        map_path, vm = write_vocab_map(out, draft_dir)
        record_extra_output(out, map_path, "vocab_maps", {
            "draft_model": str(draft_dir.absolute()), "main_fingerprint": vm.main_fingerprint,
            "draft_fingerprint": vm.draft_fingerprint, "stats": vm.stats})
    return out
