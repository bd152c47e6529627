"""Finding, checking and loading a draft model for a main model.

Everything that can refuse a draft model lives here, before any drafting starts: missing or
broken files, a tokenizer that is not Whisper's, a draft no smaller than the main model, a
CTranslate2 without the step API. What comes out, ``DraftModel``, is ready to draft with: its
weights and the remap between the two vocabularies (the converter's stored table where it fits).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..backend import LoadedModel, step_api_available
from ..errors import ModelError, SpecWhisperError, TokenMapError, option_where
from ..tokenizer import WhisperTokenizer
from .vocab_remap import VocabRemap

if TYPE_CHECKING:
    from specwhisper.converters.vocab_map import VocabMap


@dataclass
class DraftModel:
    """A validated draft model: loaded weights plus the remap to the main vocabulary."""

    lm: LoadedModel
    remap: VocabRemap
    model_dir: Path


def load_draft_model(draft: str | Path, main_tokenizer: WhisperTokenizer, *, main_model_dir: str | Path | None = None,
                     device: str = "cpu", main_device: str | None = None, compute_type: str = "int8",
                     threads: int = 2, download: bool = True) -> DraftModel:
    """Resolve, validate and load a draft model for a main model with ``main_tokenizer``.

    Errors (``SpecWhisperError``): missing or broken files, a tokenizer that is not Whisper's
    byte-level BPE, an unknown or absent device, a CTranslate2 without the step API, a draft
    whose model.bin is not smaller than the main model's. Warning: a draft on another device
    than the main model (it works, but every round crosses devices).
    """
    from ..model_store import resolve_model

    if device not in ("cpu", "cuda"):
        raise ModelError(f"unknown draft device {device!r}", where=option_where("device"), hint="use cpu or cuda")
    if threads < 1:
        raise ModelError(f"draft threads must be >= 1, got {threads}", where=option_where("draft_model"))
    try:
        # Stored like the main model (the store keeps int8 copies), so model.bin sizes compare.
        draft_dir = resolve_model(draft, download=download, prefer_int8=compute_type.startswith("int8"))
        tokenizer = WhisperTokenizer.from_model_dir(draft_dir)
    except SpecWhisperError as exc:
        where = option_where("draft_model") if exc.where in (None, option_where("model")) else exc.where
        raise type(exc)(f"draft model: {exc.what}", where=where, hint=exc.hint) from None
    main_dir = Path(main_model_dir) if main_model_dir is not None else Path(main_tokenizer.source).parent
    main_bin, draft_bin = main_dir / "model.bin", draft_dir / "model.bin"
    if main_bin.is_file() and draft_bin.stat().st_size >= main_bin.stat().st_size:
        raise ModelError(f"draft model ({draft_bin.stat().st_size / 1e6:.0f} MB) is not smaller than the main model "
                         f"({main_bin.stat().st_size / 1e6:.0f} MB): it would be slower than decoding without it",
                         where=str(draft_dir), hint="use a smaller draft model (e.g. tiny.en for base), or none")
    if main_device is not None and device != main_device:
        warnings.warn(f"draft model on {device} while the main model is on {main_device}: every round crosses "
                      "devices, which usually costs more than drafting saves", stacklevel=2)
    if not step_api_available():
        raise ModelError("this CTranslate2 build has no step API (prefill/forward_step): a draft model cannot run",
                         where="python environment", hint="install ctranslate2-crisperwhisper, or drop --draft-model")
    remap = _remap(main_dir, main_tokenizer, tokenizer)
    try:
        lm = LoadedModel(draft_dir, device=device, compute_type=compute_type, threads=threads)
    except SpecWhisperError as exc:
        raise type(exc)(f"draft model: {exc.what}", where=exc.where, hint=exc.hint) from None
    return DraftModel(lm=lm, remap=remap, model_dir=draft_dir)


# Remaps made in this process, by both vocabularies and the stored table's state: making one takes
# ~1.6 s (each vocabulary's byte table, then the map read or built), and an app that opens engines
# with a draft model one after another (the test suite: some thirty) paid it every time. A remap holds
# no per-engine state (its memo of multi-token pieces is a pure function of the vocabularies). A
# broken stored table is said once per process (and again once it changes).
_REMAPS: dict[tuple, VocabRemap] = {}
_REMAPS_LOCK = threading.Lock()


def _remap(main_dir: Path, main: WhisperTokenizer, draft: WhisperTokenizer) -> VocabRemap:
    """The remap between ``main`` and ``draft`` (the stored table beside the main model where it fits),
    made once per process for the same vocabularies and the same stored table."""
    path, stored = None, None
    if main.fingerprint() != draft.fingerprint():  # one vocabulary needs no table
        from specwhisper.converters.vocab_map import vocab_map_path

        path = vocab_map_path(main_dir, draft.fingerprint())
        with contextlib.suppress(OSError):
            st = path.stat()
            stored = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    key = (main.fingerprint(), main.vocab_size, main.multilingual, draft.fingerprint(), draft.vocab_size,
           draft.multilingual, stored)
    with _REMAPS_LOCK:
        if key not in _REMAPS:
            _REMAPS[key] = VocabRemap(main, draft, _stored_map(path, main, draft))
        return _REMAPS[key]


def _stored_map(path: Path | None, main: WhisperTokenizer, draft: WhisperTokenizer) -> VocabMap | None:
    """The converter's remap table at ``path`` (beside the main model; None where the vocabularies
    are one), if it fits; else None (built on load)."""
    if path is None or not path.is_file():
        return None
    from specwhisper.converters.vocab_map import load_vocab_map

    try:
        return load_vocab_map(path, main, draft)
    except TokenMapError as exc:
        warnings.warn(f"ignoring stored vocabulary map, rebuilding it in memory: {exc.what} ({path})", stacklevel=4)
        return None
