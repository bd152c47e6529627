"""N-gram token maps: build from transcripts, a checksummed binary format, load, learn online.

    from specwhisper.tokenmap import build_token_map, load_token_map
    tmap = build_token_map(open("train.txt"), tokenizer)   # one transcript a line
    tmap.save("domain.tmap")
    tmap = load_token_map("domain.tmap", tokenizer)        # refuses a map of another tokenizer
"""

from __future__ import annotations

import os
import weakref

from .build import BuildParams, build_token_map
from .format import FORMAT_VERSION, TokenMap, TokenMapHeader


def load_token_map(source: str | os.PathLike[str] | TokenMap, tokenizer=None) -> TokenMap:
    """Memory-map a token map from its file, or take a loaded one as it is (one map shared by
    several engines); with ``tokenizer``, refuse one built for another vocabulary."""
    from specwhisper.errors import TokenMapError

    from .format import check_vocabulary, load

    if isinstance(source, TokenMap):
        if tokenizer is not None:
            check_vocabulary(source.header.fingerprint, source.header.vocab_size, _fingerprint(tokenizer),
                             tokenizer.vocab_size, source.source)
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise TokenMapError(f"a token map is a path to its file or a loaded TokenMap, got {type(source).__name__}",
                            where="tokenmap", hint="pass e.g. 'home.tmap', or load_token_map('home.tmap')")
    if tokenizer is None:
        return load(source)
    return load(source, fingerprint=_fingerprint(tokenizer), vocab_size=tokenizer.vocab_size)


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fingerprint(tokenizer) -> str:
    """Hashing a vocabulary takes ~50 ms: once per tokenizer is enough for a 'well under 100 ms' load."""
    try:
        fp = _FINGERPRINTS.get(tokenizer)
        if fp is None:
            fp = _FINGERPRINTS[tokenizer] = tokenizer.fingerprint()
        return fp
    except TypeError:  # not weak-referenceable
        return tokenizer.fingerprint()


def __getattr__(name: str):
    if name == "TokenMapDrafter":  # lives with the other drafters; imported lazily to avoid a cycle
        from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter

        return TokenMapDrafter
    raise AttributeError(name)


__all__ = ["FORMAT_VERSION", "BuildParams", "TokenMap", "TokenMapDrafter", "TokenMapHeader", "build_token_map",
           "load_token_map"]
