"""A model directory's files checked against each other and against its weights before
CTranslate2 sees them: CTranslate2 does not bound-check token ids or alignment heads, so a
vocabulary longer than the output layer, a config id past the vocabulary, or a head that is not
there, is a crash (a segmentation fault in the middle of a transcription) instead of an error.
``check_config_ids`` (config.json against the vocabulary) runs wherever a tokenizer loads, draft
models too; ``check_against_weights`` where a model loads (reading ``model.bin``'s index costs
milliseconds: no payload but one scalar)."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ModelError

HINT = "re-download or re-convert the model"


def repair_hint(model_dir: Path) -> str:
    """What mends a damaged model folder: for the model store's own (``<name>`` or its int8 copy),
    ``models pull``, which makes an int8 copy again without a network."""
    from .model_store import REGISTRY, models_dir

    name = model_dir.name.removesuffix("-int8")
    if name in REGISTRY and model_dir.parent.resolve() == models_dir().resolve():
        return f"run: specwhisper models pull {name} (it repairs the model store's copy)"
    return HINT


def check_against_weights(model_dir: Path, vocab_size: int, alignment_heads: list) -> None:
    """Refuse a vocabulary larger than the decoder's output layer and alignment heads outside its
    layers and heads."""
    from specwhisper.converters.ct2_bin import ModelBinReader

    try:
        with ModelBinReader(model_dir / "model.bin") as reader:
            variables = {v.name: v for v in reader.index.variables}
            layers = 1 + max((int(m.group(1)) for name in variables
                              if (m := re.match(r"decoder/layer_(\d+)/", name))), default=-1)
            embeddings = variables.get("decoder/embeddings/weight")
            heads_info = variables.get("decoder/num_heads")
            heads = int(reader.array(heads_info)) if heads_info is not None else None
    except ModelError as exc:  # a damaged model.bin: a model of the store is repaired by a pull, offline too
        raise ModelError(exc.what, where=exc.where, hint=repair_hint(model_dir)) from None
    if embeddings is not None and vocab_size > embeddings.shape[0]:
        raise ModelError(f"the vocabulary has {vocab_size} entries but the weights only {embeddings.shape[0]}",
                         where=str(model_dir), hint=HINT)
    for layer, head in alignment_heads:
        if layer >= layers or (heads is not None and head >= heads):
            raise ModelError(f"config.json: alignment head [{layer}, {head}] is not in the decoder ({layers} layers"
                             + (f" of {heads} heads)" if heads is not None else ")"),
                             where=str(model_dir / "config.json"), hint=HINT)


TIMESTAMP_TOKENS = 1501  # <|0.00|> ... <|30.00|>


def check_config_ids(model_dir: Path, config: dict, vocab_size: int, timestamp_begin: int) -> None:
    """A damaged vocabulary or config.json refused here: a token id past the model's output layer
    would reach CTranslate2, which does not check it (a crash, not an error). Without a vocabulary
    file the ids' kinds are checked, not their range: CTranslate2 then refuses the directory
    itself, and the size here is the tokenizer's, not the model's."""
    bounded = any((model_dir / name).is_file() for name in ("vocabulary.json", "vocabulary.txt"))
    need = timestamp_begin + TIMESTAMP_TOKENS
    if bounded and vocab_size < need:
        raise ModelError(f"the model's vocabulary has {vocab_size} entries, fewer than the {need} its tokenizer "
                         "and timestamps need", where=str(model_dir), hint="the vocabulary file may be cut short: "
                         "re-download or re-convert the model")
    limit = vocab_size if bounded else float("inf")
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        values = config.get(key, [])
        if not isinstance(values, list) or not all(_index(i) and i < limit for i in values):
            raise ModelError(f"config.json: {key} must be a list of token ids"
                             + (f" from 0 to {vocab_size - 1}" if bounded else ""),
                             where=str(model_dir / "config.json"), hint=HINT)
    heads = config.get("alignment_heads", [])
    if not isinstance(heads, list) or not all(isinstance(h, list) and len(h) == 2 and all(map(_index, h))
                                              for h in heads):
        raise ModelError("config.json: alignment_heads must be a list of [layer, head] pairs",
                         where=str(model_dir / "config.json"), hint=HINT)


def _index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
