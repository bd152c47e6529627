"""Hugging Face Whisper (a local transformers folder, or a hub id where a network exists) -> CT2.

Needs the ``convert`` extra (torch CPU + transformers); the conversion itself is CTranslate2's
``TransformersConverter`` (see ct2_export.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from specwhisper.errors import ModelError, NetworkError

from .ct2_export import export_whisper
from .model_card import file_entries, write_model_card
from .staging import staged_dir
from .weights_check import check_weights_file

# Files a conversion reads (weights are added by pattern); they are what the model card hashes.
_READ_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
               "tokenizer_config.json", "vocab.json", "merges.txt", "added_tokens.json",
               "special_tokens_map.json", "normalizer.json")


def require_torch_stack() -> None:
    """Fail with install instructions when the ``convert`` extra is missing."""
    missing = []
    for mod in ("torch", "transformers"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise ModelError(f"converting checkpoints needs {' and '.join(missing)}", where="specwhisper convert",
                         hint="pip install 'specwhisper[convert]' (CPU torch is enough: "
                              "pip install torch --index-url https://download.pytorch.org/whl/cpu)")


def is_hf_folder(path: Path) -> bool:
    cfg = path / "config.json"
    if not cfg.is_file() or (path / "model.bin").is_file():
        return False
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("model_type") == "whisper" or "WhisperForConditionalGeneration" in data.get("architectures", [])


def weight_files(folder: Path) -> list[Path]:
    """The weight files transformers will read (safetensors preferred, like from_pretrained)."""
    st = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.safetensors.index.json"))
    if st:
        return st
    return sorted(folder.glob("pytorch_model*.bin")) + sorted(folder.glob("pytorch_model*.bin.index.json"))


def download_hub(repo_id: str) -> Path:
    """Fetch the files a conversion needs from the Hugging Face hub (raises NetworkError offline)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelError("converting a hub id needs huggingface_hub", where=repo_id,
                         hint="pip install 'specwhisper[hub]', or download the folder and pass its path") from None
    patterns = [*_READ_FILES, "*.safetensors", "*.safetensors.index.json"]
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=patterns))
        if not weight_files(folder):
            folder = Path(snapshot_download(repo_id, allow_patterns=[*_READ_FILES, "pytorch_model*.bin*"]))
    except Exception as exc:  # hub errors have many types (offline, 404, auth); all mean "cannot fetch"
        raise NetworkError(f"cannot fetch {repo_id!r} from the Hugging Face hub: {type(exc).__name__}: {exc}",
                           where=repo_id,
                           hint="check the id and the network, or download the folder and pass its path") from None
    return folder


def convert_hf(source: str | Path, out_dir: str | Path, quantization: str = "int8", *,
               overwrite: bool = False, tokenizer: str | Path | None = None) -> Path:
    """Convert a Hugging Face Whisper folder (or hub id) into a CT2 directory ``out_dir``."""
    require_torch_stack()
    folder = Path(source).expanduser()
    hub_id = None
    if not folder.exists():
        hub_id = str(source)
        folder = download_hub(hub_id)
    if not is_hf_folder(folder):
        raise ModelError("not a Hugging Face Whisper folder (config.json with model_type 'whisper')",
                         where=str(folder), hint="pass a transformers Whisper checkpoint folder or hub id")
    weights = weight_files(folder)
    if not weights:
        raise ModelError("Hugging Face folder has no weights (*.safetensors or pytorch_model.bin)",
                         where=str(folder), hint="download the full checkpoint")
    for path in weights:
        check_weights_file(path)  # before transformers reads it: its error names neither file nor cure
    tok_json = Path(tokenizer).expanduser() if tokenizer else folder / "tokenizer.json"
    if tok_json.is_dir():
        tok_json = tok_json / "tokenizer.json"
    read = [p for name in _READ_FILES if (p := folder / name).is_file()] + weights
    inputs = file_entries(read, root=folder)
    if tok_json.is_file() and tok_json.parent.absolute() != folder.absolute():
        inputs += file_entries([tok_json])
    with staged_dir(out_dir, overwrite, source=folder) as tmp:
        if not tok_json.is_file():
            tok_json = _tokenizer_json_from_transformers(folder, tmp / ".tokenizer.json")
        export_whisper(folder, tmp, quantization, tok_json)
        (tmp / ".tokenizer.json").unlink(missing_ok=True)
        source_info = {"kind": "huggingface", "path": str(folder.absolute())}
        if hub_id:
            source_info["hub_id"] = hub_id
        write_model_card(tmp, source=source_info, inputs=inputs, quantization=quantization,
                         libraries=("torch", "transformers"))
    return Path(out_dir).expanduser().absolute()


def _tokenizer_json_from_transformers(folder: Path, dest: Path) -> Path:
    """Older checkpoints ship vocab.json + merges.txt only: let transformers build the fast tokenizer.

    With no tokenizer files at all, transformers 5 does not fail: it builds a tokenizer of one
    token. Written as is, the conversion then failed on a hidden staging file; it is refused here,
    naming the folder and the fix."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
        backend = getattr(tok, "backend_tokenizer", None) or getattr(tok, "_tokenizer", None)
        text = backend.to_str()
    except Exception as exc:  # any failure here means "no usable tokenizer in this folder"
        raise _no_tokenizer(folder, f"transformers could not build one: {exc}") from None
    problem = _unusable_tokenizer(text, _config_vocab_size(folder))
    if problem is not None:
        raise _no_tokenizer(folder, f"the one transformers built {problem}")
    dest.write_text(text, encoding="utf-8")
    return dest


def _unusable_tokenizer(text: str, vocab_size: int) -> str | None:
    """Why a built tokenizer cannot serve a Whisper model of ``vocab_size`` outputs, or None."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception for JSON it cannot parse
        return f"cannot be read: {exc}"
    n = tok.get_vocab_size(with_added_tokens=True)
    if tok.token_to_id("<|endoftext|>") is None or tok.token_to_id("<|startoftranscript|>") is None:
        return f"has no Whisper control tokens ({n} token{'s' if n != 1 else ''})"
    if n < vocab_size // 2:
        return f"has {n} tokens for a model with {vocab_size} outputs"
    return None


def _config_vocab_size(folder: Path) -> int:
    try:
        return int(json.loads((folder / "config.json").read_text(encoding="utf-8")).get("vocab_size", 0))
    except (OSError, ValueError, TypeError):
        return 0  # is_hf_folder read it already; export_whisper reports a config that went bad since


def _no_tokenizer(folder: Path, why: str) -> ModelError:
    return ModelError(f"the folder has no tokenizer.json and {why}", where=str(folder),
                      hint="pass --tokenizer path/to/tokenizer.json (or a model folder holding one) of a Whisper "
                           "model with the same vocabulary, e.g. tiny.en for *.en checkpoints, base otherwise")
