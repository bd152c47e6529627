"""Domain token maps for the benchmark: built once per set and model from the set's train text.

The test clips of a domain set are never in its train text (the corpus checks that), so a map
built here drafts the way a deployed domain map would.
"""

from __future__ import annotations

from pathlib import Path

from .data import train_text


def tokenmap_for_set(set_name: str, root: Path, tokenizer, cache: Path,
                     prebuilt: Path | None = None) -> tuple[Path | None, str | None]:
    """(map path, None) or (None, why there is none). A prebuilt ``<set>.tmap`` in ``prebuilt`` wins."""
    if prebuilt is not None:
        candidate = prebuilt / f"{set_name}.tmap"
        return (candidate, None) if candidate.is_file() else (None, f"no {candidate}")
    source = train_text(set_name, root)
    if source is None:
        return None, f"set {set_name} has no domain train text"
    if not source.is_file():
        return None, f"missing {source}"
    try:
        from specwhisper.tokenmap import build_token_map
    except ImportError as exc:
        return None, f"specwhisper.tokenmap cannot build maps yet ({exc})"
    path = cache / f"{set_name}-{tokenizer.fingerprint()[:12]}.tmap"
    if path.is_file():
        return path, None
    lines = [line.strip() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        build_token_map(lines, tokenizer).save(path)
    except Exception as exc:  # a broken builder must not stop the other systems
        return None, f"token map build failed: {type(exc).__name__}: {exc}"
    return path, None
