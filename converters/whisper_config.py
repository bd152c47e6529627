"""The decoding lists CTranslate2 reads from a Whisper model's ``config.json``.

CTranslate2's Whisper runtime needs ``suppress_ids`` (never emitted), ``suppress_ids_begin`` (not
emitted first), ``lang_ids`` (for language detection) and ``alignment_heads`` (for word timing).
Hugging Face checkpoints carry them in ``generation_config.json``; OpenAI ``.pt`` files and bare
checkpoints do not, so they are derived here from the tokenizer the way OpenAI's decoder does it.
"""

from __future__ import annotations

from tokenizers import Tokenizer

from specwhisper.tokenizer import LANGUAGE_CODES

# Symbols Whisper suppresses because they stand for non-speech annotations (OpenAI's decoding rules).
_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC = tuple("♩♪♫♬♭♮♯")
# Control tokens that must never be sampled as text (either spelling of the no-speech token).
_CONTROL = ("<|startoftranscript|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
            "<|startofprev|>", "<|nocaptions|>", "<|nospeech|>")

# Identified OpenAI checkpoints (sha256 of the released .pt, as published in its download URL).
OPENAI_CHECKPOINTS = {
    "d3dd57d32accea0b295c96e26691aa14d8822fac7d9d27d5dc00b4ca2826dd03": "tiny.en",
    "65147644a518d12f04e32d6f3b26facc3f8dd46e5390956a9424a650c0ce22b9": "tiny",
    "25a8566e1d0c1e2231d1c762132cd20e0f96a85d16145c3a00adf5d1ac670ead": "base.en",
    "ed3a0b6b1c0edf879ad9b11b1af5a0e6ab5db9205f891f668f8b0e6c6326e34e": "base",
    "f953ad0fd29cacd07d5a9eda5624af0f6bcf2258be67c92b79389873d91e0872": "small.en",
    "9ecf779972d90ba49c06d968637d720dd632c55bbf19d441fb42bf17a411e794": "small",
    "d7440d1dc186f76616474e0ff0b3b6b879abc9d1a4926b7adfa41db2d497ab4f": "medium.en",
    "345ae4da62f9b3d59415adc60127b97c714f32e89e936602e85993674d08dcb1": "medium",
    "e4b87e7e0bf463eb8e6956e646f1e277e901512310def2c24bf0e11bd3c28e9a": "large-v1",
    "81f7c96c852ee8fc832187b0132e569d6c3065a3252ed18e56effd0b6a73e524": "large-v2",
    "e5b1a55b89c1367dacf97e3e19bfd829a01529dbfdeefa8caeb59b3f1b81dadb": "large-v3",
    "aff26ae408abcba5fbf8813c21e62b0941638c5f6eebfb145be0c9839262a19a": "large-v3-turbo",
}


def non_speech_tokens(tok: Tokenizer) -> list[int]:
    """Ids of single tokens that only spell annotations (brackets, music signs, speaker dashes)."""
    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    result = {enc(" -")[0], enc(" '")[0]}
    for symbol in _SYMBOLS + list(_MUSIC):
        for ids in (enc(symbol), enc(" " + symbol)):
            if len(ids) == 1 or (ids and symbol in _MUSIC):
                result.add(ids[0])
    return sorted(result)


def suppress_ids(tok: Tokenizer) -> list[int]:
    controls = [i for t in _CONTROL if (i := tok.token_to_id(t)) is not None]
    return sorted(set(non_speech_tokens(tok)) | set(controls))


def suppress_ids_begin(tok: Tokenizer) -> list[int]:
    """A blank and end-of-text may not open a transcript."""
    return [tok.encode(" ", add_special_tokens=False).ids[0], tok.token_to_id("<|endoftext|>")]


def lang_ids(tok: Tokenizer) -> list[int]:
    return sorted(i for code in LANGUAGE_CODES if (i := tok.token_to_id(f"<|{code}|>")) is not None)


def default_alignment_heads(num_layers: int, num_heads: int) -> list[list[int]]:
    """Every head of the upper half of the decoder (CTranslate2's default when none are known)."""
    return [[layer, head] for layer in range(num_layers // 2, num_layers) for head in range(num_heads)]


def known_alignment_heads(name: str | None) -> list[list[int]] | None:
    """OpenAI's published heads for an identified checkpoint, from CTranslate2's own table."""
    if not name:
        return None
    try:
        from ctranslate2.converters.transformers import _WHISPER_ALIGNMENT_HEADS as table
    except ImportError:  # the table is private to CTranslate2; without it the default applies
        return None
    heads = table.get(f"openai/whisper-{name}") or table.get(f"openai/whisper-{name.replace('-v1', '')}")
    return [list(h) for h in heads] if heads else None


def complete_config(config: dict, tok: Tokenizer, num_layers: int, num_heads: int,
                    checkpoint_name: str | None = None) -> dict:
    """Fill the lists CTranslate2 needs where the source left them out (present values are kept)."""
    out = dict(config)
    if not out.get("suppress_ids"):
        out["suppress_ids"] = suppress_ids(tok)
    if not out.get("suppress_ids_begin"):
        out["suppress_ids_begin"] = suppress_ids_begin(tok)
    if not out.get("lang_ids"):
        out["lang_ids"] = lang_ids(tok)
    if not out.get("alignment_heads"):
        out["alignment_heads"] = (known_alignment_heads(checkpoint_name)
                                  or default_alignment_heads(num_layers, num_heads))
    out["alignment_heads"] = [list(h) for h in out["alignment_heads"]]
    return out
