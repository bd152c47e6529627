"""Token ids of one Whisper vocabulary -> ids of another that spell the same bytes.

A draft model may have another vocabulary than the main model: multilingual Whisper and the
English-only ``.en`` models use different BPE merges, so even ordinary words have other ids,
and the control tokens sit one id apart. Both are byte-level BPE over the same 256-byte
alphabet, so text is remapped through bytes:

* ids are grouped into words (a new word starts at a token beginning with a space);
* a one-token word goes through the precomputed single-token table of ``converters.vocab_map``
  (the other side's token with the very same bytes, where one exists; about 58 % of tokens for
  base <-> tiny.en), else through its bytes re-tokenized (cached);
* a word of several tokens (``" fox"`` + ``"."``, ``" transcri"`` + ``"ption"``, the byte pieces of
  ``"日"``) is re-tokenized from its bytes, so multi-token boundaries come out as the other
  tokenizer would split them; bytes that are not whole UTF-8 characters (a word cut inside a
  character) are tokenized as raw byte pieces, so no byte is ever lost;
* control tokens map by meaning (the same table: same ``<|...|>`` name, timestamps by time).

Every mapping is byte exact; only its BPE split may differ from the other model's own choice,
which costs drafting acceptance, never text (the main model verifies every token).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TokenMapError
from ..tokenizer import WhisperTokenizer

if TYPE_CHECKING:
    from specwhisper.converters.vocab_map import VocabMap

_SURROGATE_RUN = re.compile(r"[\udc80-\udcff]+")


@lru_cache(maxsize=1)
def byte_alphabet() -> tuple[dict[int, str], dict[str, int]]:
    """The byte-level BPE alphabet: every byte as one printable character, and back.

    Printable Latin-1 bytes stand for themselves; the others (controls, space, 127-160, 173)
    are shifted to U+0100 onward in byte order, which is how ``"Ġ"`` comes to mean a space.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    to_char: dict[int, str] = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in to_char:
            to_char[b] = chr(256 + shifted)
            shifted += 1
    return to_char, {c: b for b, c in to_char.items()}


class ByteTokenizer:
    """Bytes <-> ids for one Whisper vocabulary (text tokens only; control tokens are handled apart)."""

    def __init__(self, tokenizer: WhisperTokenizer) -> None:
        self.whisper = tokenizer
        raw = tokenizer._tok  # the HF tokenizer: its BPE model and pre-tokenizer, used directly
        model = raw.model
        pre = raw.pre_tokenizer
        if type(model).__name__ != "BPE" or pre is None or "ByteLevel" not in repr(pre):
            raise TokenMapError("the draft or main tokenizer is not Whisper's byte-level BPE",
                                where=tokenizer.source,
                                hint="use Whisper model directories (tokenizer.json of a Whisper checkpoint)")
        self._model = model
        self._pre = pre
        self.eot = tokenizer.special.eot
        _, from_char = byte_alphabet()
        added = {int(i) for i in raw.get_added_tokens_decoder()}
        # Text tokens' bytes; None for control tokens and timestamps (which map by meaning).
        self.piece_bytes: list[bytes | None] = [None] * max(tokenizer.vocab_size, raw.get_vocab_size(True))
        for piece, tid in raw.get_vocab(with_added_tokens=True).items():
            if tid >= len(self.piece_bytes) or tid in added or tid >= self.eot:
                continue
            try:
                self.piece_bytes[tid] = bytes(from_char[c] for c in piece)
            except KeyError:
                raise TokenMapError(f"token {tid} ({piece!r}) is not made of byte-level characters",
                                    where=tokenizer.source,
                                    hint="only byte-level BPE (Whisper) tokenizers can be remapped") from None
        self._to_char = byte_alphabet()[0]

    def is_text(self, tid: int) -> bool:
        return 0 <= tid < len(self.piece_bytes) and self.piece_bytes[tid] is not None

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids spelling exactly ``data``: whole characters as the BPE splits text, stray bytes as byte pieces.

        Goes through the pre-tokenizer and the BPE model directly (never ``encode``), so text such
        as ``"<|endoftext|>"`` stays text and is not read as a control token.
        """
        text = data.decode("utf-8", errors="surrogateescape")
        ids: list[int] = []
        pos = 0
        for m in _SURROGATE_RUN.finditer(text):
            ids += self._encode_text(text[pos:m.start()])
            raw = m.group().encode("utf-8", errors="surrogateescape")
            ids += self._tokenize("".join(self._to_char[b] for b in raw))
            pos = m.end()
        ids += self._encode_text(text[pos:])
        return ids

    def _encode_text(self, text: str) -> list[int]:
        if not text:
            return []
        ids: list[int] = []
        for piece, _ in self._pre.pre_tokenize_str(text):
            ids += self._tokenize(piece)
        return ids

    def _tokenize(self, piece: str) -> list[int]:
        return [t.id for t in self._model.tokenize(piece)]


class _Direction:
    """One direction of the remap: source ids -> target ids, word by word."""

    def __init__(self, src: ByteTokenizer, dst: ByteTokenizer, table: np.ndarray) -> None:
        self.src, self.dst = src, dst
        self._table = [int(t) for t in table]  # src id -> dst id with the same bytes / meaning, or -1
        self._multi: dict[int, list[int]] = {}  # single tokens with no one-token counterpart
        self._words: dict[bytes, list[int]] = {}

    def map(self, ids: Sequence[int]) -> tuple[list[int], int]:
        """Target ids for ``ids`` and how many source ids were mapped (stops at one with no counterpart)."""
        out: list[int] = []
        word: list[int] = []
        piece_bytes = self.src.piece_bytes
        for n, tid in enumerate(ids):
            b = piece_bytes[tid] if 0 <= tid < len(piece_bytes) else None
            if b is None:
                self._flush(word, out)
                target = self._table[tid] if 0 <= tid < len(self._table) else -1
                if target < 0:
                    return out, n
                out.append(target)
                continue
            if word and b[:1] == b" ":
                self._flush(word, out)
            word.append(tid)
        self._flush(word, out)
        return out, len(ids)

    def _flush(self, word: list[int], out: list[int]) -> None:
        if not word:
            return
        if len(word) == 1:
            out += self.single(word[0])
        else:
            data = b"".join(self.src.piece_bytes[t] for t in word)  # type: ignore[misc]
            hit = self._words.get(data)
            if hit is None:
                if len(self._words) > 50_000:
                    self._words.clear()
                hit = self._words[data] = self.dst.encode_bytes(data)
            out += hit
        word.clear()

    def single(self, tid: int) -> list[int]:
        one = self._table[tid]
        if one >= 0:
            return [one]
        hit = self._multi.get(tid)
        if hit is None:
            hit = self._multi[tid] = self.dst.encode_bytes(self.src.piece_bytes[tid] or b"")
        return hit


class VocabRemap:
    """Main ids <-> draft ids (identity when both vocabularies are the same).

    ``vocab_map`` is the converter's table for these two tokenizers (``converters.vocab_map``:
    stored beside the main model by ``specwhisper convert --draft-map``); built in memory
    (about half a second) when not given.
    """

    def __init__(self, main: WhisperTokenizer, draft: WhisperTokenizer, vocab_map: VocabMap | None = None) -> None:
        self.main, self.draft = main, draft
        self.identical = main.fingerprint() == draft.fingerprint() and main.vocab_size == draft.vocab_size
        if self.identical:
            return
        m, d = ByteTokenizer(main), ByteTokenizer(draft)
        if vocab_map is None:
            from specwhisper.converters.vocab_map import build_vocab_map

            vocab_map = build_vocab_map(Path(main.source).parent, Path(draft.source).parent)
        if (vocab_map.main_fingerprint, vocab_map.draft_fingerprint) != (main.fingerprint(), draft.fingerprint()):
            raise TokenMapError("vocabulary map was built for other tokenizers", where=draft.source,
                                hint="rebuild it for this main/draft pair (specwhisper convert ... --draft-map)")
        self._to_draft = _Direction(m, d, vocab_map.main_to_draft)
        self._to_main = _Direction(d, m, vocab_map.draft_to_main)

    def to_draft(self, main_ids: Sequence[int]) -> tuple[list[int], int]:
        """Draft ids for main ids, and how many main ids had a counterpart (a prefix)."""
        if self.identical:
            return list(main_ids), len(main_ids)
        return self._to_draft.map(main_ids)

    def to_main(self, draft_ids: Sequence[int]) -> tuple[list[int], int]:
        """Main ids for draft ids, and how many draft ids had a counterpart (a prefix)."""
        if self.identical:
            return list(draft_ids), len(draft_ids)
        return self._to_main.map(draft_ids)

    def prompt_to_draft(self, prompt: Sequence[int]) -> list[int] | None:
        """The draft model's prompt for a main prompt: previous text remapped, SOT sequence rebuilt by meaning.

        None when the draft model cannot follow (an English-only draft for another language or
        for translation): drafting is then off for that window.
        """
        if self.identical:
            return list(prompt)
        ms, ds = self.main.special, self.draft.special
        sot_at = next((i for i, t in enumerate(prompt) if t == ms.sot), None)
        if sot_at is None:
            return None
        context = list(prompt[1:sot_at]) if sot_at > 0 and prompt[0] == ms.sot_prev else []
        tail = prompt[sot_at + 1:]
        language = next((self.main.language_tokens[t] for t in tail if t in self.main.language_tokens), None)
        task = "translate" if ms.translate in tail else "transcribe"
        timestamps = ms.no_timestamps not in tail
        if not self.draft.multilingual and ((language not in (None, "en")) or task == "translate"):
            return None
        head: list[int] = []
        if context:
            mapped, n = self.to_draft(context)
            if n < len(context):
                return None
            head = [ds.sot_prev, *mapped]
        return head + self.draft.sot_sequence(language, task, timestamps)
