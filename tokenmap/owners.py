"""Which pulled models a map's tokenizer fingerprint belongs to, to name them when a map meets
another model's tokenizer ("built for tiny.en's tokenizer: use --model tiny.en" says what to do,
two hashes do not).

Only the refusal's path asks: fingerprinting a model reads and hashes its vocabulary (~0.3 s), so
nothing here runs while a map loads as it should. Only models already in the local store are
looked at: naming one must never download anything.
"""

from __future__ import annotations

from pathlib import Path

from specwhisper.errors import SpecWhisperError

# tokenizer.json (path, size, mtime) -> fingerprint: a second refusal in one process is free
_CACHE: dict[tuple[str, int, int], str] = {}


def models_with_fingerprint(fingerprint: str) -> list[str]:
    """Names of the pulled registry models whose tokenizer has ``fingerprint``, registry order."""
    from specwhisper.model_store import REGISTRY, is_pulled, model_path

    return [name for name in REGISTRY
            if is_pulled(name) and _fingerprint_of(model_path(name)) == fingerprint]


def _fingerprint_of(model_dir: Path) -> str | None:
    """The tokenizer fingerprint of a model folder, as maps record it; None where it cannot be read
    (a damaged model must not turn one clear error into another)."""
    from specwhisper.tokenizer import WhisperTokenizer

    path = model_dir / "tokenizer.json"
    try:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in _CACHE:
            _CACHE[key] = WhisperTokenizer.from_model_dir(model_dir).fingerprint()
        return _CACHE[key]
    except (SpecWhisperError, OSError):
        return None


def owner_phrase(names: list[str]) -> str:
    """``tiny.en's`` for one model, ``the one tiny and base share`` for several."""
    if len(names) == 1:
        return f"{names[0]}'s"
    return f"the one {', '.join(names[:-1])} and {names[-1]} share"
