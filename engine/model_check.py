"""What a model directory's text files say, checked against its weights before CTranslate2 sees
them: CTranslate2 does not bound-check token ids or alignment heads, so a vocabulary longer than
the output layer, or a head that is not there, is a crash (a segmentation fault in the middle of a
transcription) instead of an error. Reading ``model.bin``'s index costs milliseconds (no payload
but one scalar)."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ModelError

HINT = "re-download or re-convert the model"


def check_against_weights(model_dir: Path, vocab_size: int, alignment_heads: list) -> None:
    """Refuse a vocabulary larger than the decoder's output layer and alignment heads outside its
    layers and heads."""
    from specwhisper.converters.ct2_bin import ModelBinReader

    with ModelBinReader(model_dir / "model.bin") as reader:
        variables = {v.name: v for v in reader.index.variables}
        layers = 1 + max((int(m.group(1)) for name in variables if (m := re.match(r"decoder/layer_(\d+)/", name))),
                         default=-1)
        embeddings = variables.get("decoder/embeddings/weight")
        heads_info = variables.get("decoder/num_heads")
        heads = int(reader.array(heads_info)) if heads_info is not None else None
    if embeddings is not None and vocab_size > embeddings.shape[0]:
        raise ModelError(f"the vocabulary has {vocab_size} entries but the weights only {embeddings.shape[0]}",
                         where=str(model_dir), hint=HINT)
    for layer, head in alignment_heads:
        if layer >= layers or (heads is not None and head >= heads):
            raise ModelError(f"config.json: alignment head [{layer}, {head}] is not in the decoder ({layers} layers"
                             + (f" of {heads} heads)" if heads is not None else ")"),
                             where=str(model_dir / "config.json"), hint=HINT)
