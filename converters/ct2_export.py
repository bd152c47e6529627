"""Run CTranslate2's own Whisper converter and finish the directory the way the engine expects.

Both the Hugging Face and the OpenAI paths end here. CTranslate2's ``TransformersConverter`` builds
the model spec; it writes float32 (or float16) and the int8 variants are then re-encoded by
``quantize.requantize_model_bin`` so that every int8 model this project writes, from any source,
uses one quantizer (conv weights kept in float, see quantize.py). Then config.json gets the
decoding lists CTranslate2 needs, and tokenizer.json / preprocessor_config.json are copied.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from specwhisper.errors import ModelError

from .quantize import requantize_model_bin
from .staging import write_json
from .whisper_config import complete_config


class TokenizerAdapter:
    """The three things CTranslate2's Whisper loader asks of a tokenizer, served from tokenizer.json.

    Using ``tokenizers`` directly keeps the conversion independent of how a given transformers
    release builds its tokenizer classes.
    """

    additional_special_tokens: list[str] = []

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tok = load_tokenizer_json(path)

    def get_vocab(self) -> dict[str, int]:
        return self.tok.get_vocab(with_added_tokens=True)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.tok.token_to_id(token)


def load_tokenizer_json(path: Path) -> Tokenizer:
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for unreadable files
        raise ModelError(f"tokenizer.json cannot be read: {exc}", where=str(path),
                         hint="pass the tokenizer.json of a Whisper model with the same vocabulary") from None
    if tok.token_to_id("<|endoftext|>") is None or tok.token_to_id("<|startoftranscript|>") is None:
        raise ModelError("tokenizer.json has no Whisper control tokens", where=str(path),
                         hint="pass the tokenizer.json of a Whisper model with the same vocabulary")
    ids = sorted(tok.get_vocab(with_added_tokens=True).values())
    if ids != list(range(len(ids))):
        raise ModelError("tokenizer.json has gaps in its token ids", where=str(path),
                         hint="pass the tokenizer.json of a Whisper model")
    return tok


def check_vocab_fits(tok: Tokenizer, vocab_size: int, where: str) -> None:
    """A Whisper tokenizer fits a model when its control tokens sit where that vocabulary puts them."""
    eot = tok.token_to_id("<|endoftext|>")
    n = tok.get_vocab_size(with_added_tokens=True)
    expected_eot = 50256 if vocab_size == 51864 else 50257
    if n > vocab_size or eot != expected_eot:
        kind = "English-only" if vocab_size == 51864 else "multilingual"
        raise ModelError(
            f"tokenizer does not match the checkpoint: the model has {vocab_size} outputs ({kind}), the "
            f"tokenizer has {n} tokens with <|endoftext|> at {eot}",
            where=where,
            hint=f"use the tokenizer.json of an {kind} Whisper model (e.g. tiny.en for *.en, base otherwise)",
        )


def _converter_class() -> type:
    from ctranslate2.converters import TransformersConverter

    class _WhisperConverter(TransformersConverter):
        """CTranslate2's converter with our tokenizer and, optionally, a model already in memory."""

        def __init__(self, folder: str, tokenizer: TokenizerAdapter, model: Any = None) -> None:
            super().__init__(folder)
            self._tok_adapter = tokenizer
            self._model_in_memory = model

        def load_model(self, model_class, model_name_or_path, **kwargs):
            if self._model_in_memory is not None:
                return self._model_in_memory
            return super().load_model(model_class, model_name_or_path, **kwargs)

        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return self._tok_adapter

    return _WhisperConverter


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars or deprecation chatter from transformers during a conversion (restored after)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _conversion_errors() -> tuple[type[Exception], ...]:
    """What a checkpoint that cannot be converted raises inside transformers and CTranslate2.
    safetensors' error derives from Exception only, so it is named here (a file damaged past
    ``weights_check``'s header test must not end in a traceback either)."""
    errors: tuple[type[Exception], ...] = (ValueError, RuntimeError, OSError, KeyError, AttributeError,
                                           NotImplementedError)
    try:
        from safetensors import SafetensorError
    except ImportError:
        return errors
    return (*errors, SafetensorError)


def export_whisper(hf_dir: Path, out: Path, quantization: str, tokenizer_json: Path, *,
                   model: Any = None, checkpoint_name: str | None = None) -> dict:
    """Convert the Whisper checkpoint in ``hf_dir`` (or ``model``, whose config is in ``hf_dir``) into ``out``.

    Returns the finished config.json contents.
    """
    adapter = TokenizerAdapter(tokenizer_json)
    hf_config = _read_json(hf_dir / "config.json")
    vocab_size = int(hf_config.get("vocab_size", 0))
    check_vocab_fits(adapter.tok, vocab_size, str(tokenizer_json))
    work = out / ".ct2"
    intermediate = "float16" if quantization in ("float16", "int8_float16") else "float32"
    try:
        with _quiet_transformers():
            _converter_class()(str(hf_dir), adapter, model).convert(str(work), quantization=intermediate)
    except _conversion_errors() as exc:
        raise ModelError(f"CTranslate2 could not convert the checkpoint: {exc}", where=str(hf_dir),
                         hint="check that this is a Whisper checkpoint (WhisperForConditionalGeneration)") from None
    if quantization.startswith("int8"):
        requantize_model_bin(work / "model.bin", out / "model.bin", quantization)
        (work / "model.bin").unlink()
    for p in work.iterdir():
        os.replace(p, out / p.name)
    work.rmdir()

    config = complete_config(_read_json(out / "config.json"), adapter.tok,
                             int(hf_config["decoder_layers"]), int(hf_config["decoder_attention_heads"]),
                             checkpoint_name)
    write_json(out / "config.json", config)
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    pre = hf_dir / "preprocessor_config.json"
    if pre.is_file():
        shutil.copyfile(pre, out / "preprocessor_config.json")
    else:
        write_json(out / "preprocessor_config.json", default_preprocessor_config(int(hf_config.get("num_mel_bins", 80))))
    return config


def default_preprocessor_config(n_mels: int) -> dict:
    """Whisper's feature extractor settings (what faster-whisper-style loaders read for n_mels)."""
    return {
        "chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": n_mels,
        "hop_length": 160, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
        "padding_side": "right", "padding_value": 0.0, "processor_class": "WhisperProcessor",
        "return_attention_mask": False, "sampling_rate": 16000,
    }


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError("config.json is missing", where=str(path.parent),
                         hint="point at a Hugging Face Whisper folder (config.json + weights)") from None
    except (OSError, ValueError) as exc:
        raise ModelError(f"config.json cannot be read: {exc}", where=str(path),
                         hint="re-download the checkpoint") from None
