"""The token map file: a fixed little-endian header, then four arrays, checksummed, memory-mappable.

Layout (version 1)::

    header (128 bytes): magic "SWTOKMAP", format version, header size, tokenizer fingerprint,
        vocabulary size, n, max_len, begin and EOT ids, flags, node / transcript / token counts,
        build parameters, payload size, SHA-256 of header (checksum zeroed) + payload
    payload: token int32[M] | count uint32[M] | best int32[M] | child_lo uint32[M + 1]
        each array starting on a 64-byte boundary

Version 2 adds the language of the transcripts (a Whisper code such as "en"): the 128 bytes of
version 1 (version 2, header size 192), then the code in 16 ASCII bytes, NUL-padded, and zeros to
192 bytes; the checksum covers all 192. The language is what a map implies for transcription
(``--tokenmap`` sets it unless ``--language`` is given): detection on short commands is unreliable
(base picked Thai, Latvian and Latin for accented English commands), and the map knows better.
A map without a language is written as version 1, so older readers still read it; version 1
files load with no language implied.

Why not pickle or npz: a map is untrusted input that must load in milliseconds; fixed arrays are
mapped straight from the file, and nothing in them can run code.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import struct
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specwhisper.errors import TokenMapError
from specwhisper.io_utils import atomic_write_bytes, write_failure

from .trie import TrieArrays

MAGIC = b"SWTOKMAP"
FORMAT_VERSION = 2  # the newest version this code reads and writes
HEADER_SIZE = 128  # version 1's header, the fixed start of every version's
HEADER_SIZES = {1: HEADER_SIZE, 2: 192}  # by version
LANGUAGE_BYTES = 16
ALIGN = 64
FLAG_LEARNED = 1  # written by online learning (--learn-save), not by the builder

_HEADER = struct.Struct("<8sII16sIHHiiIQQQIIIQ32s")
_CHECKSUM_AT = _HEADER.size - 32  # the checksum is the header's last field
_ARRAYS = (("token", "<i4", 0), ("count", "<u4", 0), ("best", "<i4", 0), ("child_lo", "<u4", 1))
_REBUILD = "rebuild it with: specwhisper tokenmap build TRANSCRIPTS --model MODEL -o FILE"


@dataclass(frozen=True)
class TokenMapHeader:
    """What a map was built for and how (the fixed header, minus layout fields)."""

    fingerprint: str
    vocab_size: int
    n: int
    max_len: int
    begin: int
    eot: int
    n_sequences: int
    n_tokens: int
    min_count: int
    prefix_min_count: int
    top_k: int  # 0: no per-context limit
    flags: int = 0
    language: str | None = None  # of the transcripts (version 2); None: no language implied

    @property
    def version(self) -> int:
        """The format version this header is written in: 2 only where it holds a language."""
        return 2 if self.language else 1

    @property
    def size(self) -> int:
        return HEADER_SIZES[self.version]


class TokenMap:
    """A loaded (or freshly built) map: header plus trie arrays, with the few lookups drafting needs."""

    def __init__(self, header: TokenMapHeader, arrays: TrieArrays, source: str = "<memory>",
                 _buffer: object = None) -> None:
        self.header = header
        self.arrays = arrays
        self.source = source
        self._buffer = _buffer  # keeps the memory map alive
        # memoryviews give plain-int scalar access, an order of magnitude faster than numpy indexing
        self._tok = memoryview(np.ascontiguousarray(arrays.token, dtype=np.int32))
        self._cnt = memoryview(np.ascontiguousarray(arrays.count, dtype=np.uint32))
        self._best = memoryview(np.ascontiguousarray(arrays.best, dtype=np.int32))
        self._lo = memoryview(np.ascontiguousarray(arrays.child_lo, dtype=np.uint32))
        self.begin_node = self.child(0, header.begin)
        self._parent: np.ndarray | None = None

    # --- lookups ------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return self.arrays.n_nodes

    @property
    def depth(self) -> int:
        """Deepest n-gram path: a context of ``n`` plus a continuation of ``max_len``."""
        return self.header.n + self.header.max_len

    def child(self, node: int, token: int) -> int:
        """The child of ``node`` reached by ``token``, or -1."""
        lo, hi = self._lo[node], self._lo[node + 1]
        i = bisect_left(self._tok, token, lo, hi)
        return i if i < hi and self._tok[i] == token else -1

    def count(self, node: int) -> int:
        return self._cnt[node]

    def fanout(self, node: int) -> int:
        return self._lo[node + 1] - self._lo[node]

    def best(self, node: int) -> int:
        return self._best[node]

    def token_of(self, node: int) -> int:
        return self._tok[node]

    def find(self, tokens: Sequence[int], start: int = 0) -> int:
        """Node of the path ``tokens`` below ``start`` (the root by default), or -1."""
        node = start
        for t in tokens:
            node = self.child(node, t)
            if node < 0:
                return -1
        return node

    def below(self, anchor: int, recent: Sequence[int]) -> tuple[dict[int, int], int]:
        """Followers of ``recent`` anywhere in the subtree of ``anchor``: a context with a gap.

        After a slot ("navigate to | 803 Maple Drive, | Leeds") the utterance's own prefix is lost,
        but "the utterance began like this" still matters ("Can you ..." ends with "?"). Returns
        (follower token -> count, count of the context). Breadth-first layout keeps every depth of a
        subtree contiguous, so each depth is one vectorised comparison.
        """
        q = len(recent)
        tok, lo_arr = self.arrays.token, self.arrays.child_lo
        parent = self._parents()
        lo, hi = int(lo_arr[anchor]), int(lo_arr[anchor + 1])
        depth, found = 1, []
        while lo < hi:
            if depth >= q:
                idx = np.flatnonzero(tok[lo:hi] == recent[-1]) + lo
                up = idx
                for j in range(2, q + 1):
                    if not idx.size:
                        break
                    up = parent[up]
                    keep = tok[up] == recent[-j]
                    idx, up = idx[keep], up[keep]
                if idx.size:
                    found.append(idx)
            lo, hi = int(lo_arr[lo]), int(lo_arr[hi])
            depth += 1
        if not found:
            return {}, 0
        nodes = np.concatenate(found)
        first, last = lo_arr[nodes].astype(np.int64), lo_arr[nodes + 1].astype(np.int64)
        sizes = last - first
        if not sizes.sum():
            return {}, 0
        kids = np.repeat(first - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        uniq, inverse = np.unique(tok[kids], return_inverse=True)
        sums = np.bincount(inverse, weights=self.arrays.count[kids].astype(np.float64))
        return dict(zip(uniq.tolist(), sums.astype(np.int64).tolist())), int(self.arrays.count[nodes].sum())

    def _parents(self) -> np.ndarray:
        """Parent of every node (computed on first use: only the gapped lookup needs it)."""
        if self._parent is None:
            fanout = np.diff(self.arrays.child_lo.astype(np.int64))
            parent = np.zeros(self.n_nodes, dtype=np.int32)
            parent[1:] = np.repeat(np.arange(self.n_nodes, dtype=np.int32), fanout)
            self._parent = parent
        return self._parent

    def children(self, node: int) -> list[tuple[int, int, int]]:
        """(token, count, child node) of every child, most frequent first (ties: lower token id)."""
        lo, hi = self._lo[node], self._lo[node + 1]
        kids = [(self._tok[i], self._cnt[i], i) for i in range(lo, hi)]
        kids.sort(key=lambda k: (-k[1], k[0]))
        return kids

    def continuations(self, node: int, limit: int = 10, max_depth: int | None = None) -> list[tuple[list[int], int]]:
        """Ranked continuations below ``node``: whole paths to a leaf (or ``max_depth``), count first, then length."""
        max_depth = max_depth if max_depth is not None else self.header.max_len
        found: list[tuple[list[int], int]] = []
        stack: list[tuple[int, list[int]]] = [(node, [])]
        while stack:
            cur, path = stack.pop()
            kids = self.children(cur) if len(path) < max_depth else []
            if not kids and path:
                found.append((path, self._cnt[cur]))
                continue
            for tok, _cnt, child in kids[: max(limit, 1)]:
                stack.append((child, path + [tok]))
        found.sort(key=lambda f: (-f[1], -len(f[0]), f[0]))
        return found[:limit]

    def stats(self) -> dict:
        h = self.header
        begin_kids = self.fanout(self.begin_node) if self.begin_node >= 0 else 0
        return {
            "format_version": h.version, "language": h.language, "fingerprint": h.fingerprint,
            "vocab_size": h.vocab_size,
            "n": h.n, "max_len": h.max_len, "begin": h.begin, "eot": h.eot, "learned": bool(h.flags & FLAG_LEARNED),
            "transcripts": h.n_sequences, "tokens": h.n_tokens, "nodes": self.n_nodes,
            "unigram_contexts": self.fanout(0), "utterance_starts": begin_kids, "min_count": h.min_count,
            "prefix_min_count": h.prefix_min_count, "top_k": h.top_k or None,
            "bytes": encoded_size(self.n_nodes, h.language),
        }

    # --- files --------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return encode(self.header, self.arrays)

    def save(self, path: str | os.PathLike[str], option: str | None = None) -> Path:
        """Write atomically: the file appears whole or not at all, and a failed write (a full or
        read-only disk) leaves a previous file at ``path`` as it was. ``option``: the command-line
        option that chose ``path``, named in the error's hint."""
        try:
            return atomic_write_bytes(path, self.to_bytes())
        except OSError as exc:
            raise write_failure(exc, path, "the token map", option=option, error=TokenMapError) from None


def _layout(n_nodes: int) -> tuple[list[int], int]:
    """Byte offset of each array inside the payload, and the payload size."""
    offsets, pos = [], 0
    for _name, dtype, extra in _ARRAYS:
        offsets.append(pos)
        pos += np.dtype(dtype).itemsize * (n_nodes + extra)
        pos = (pos + ALIGN - 1) // ALIGN * ALIGN
    return offsets, pos


def encoded_size(n_nodes: int, language: str | None = None) -> int:
    """File size of a map of ``n_nodes`` nodes (with a language: a version 2 header)."""
    return HEADER_SIZES[2 if language else 1] + _layout(n_nodes)[1]


def encode(header: TokenMapHeader, arrays: TrieArrays) -> bytes:
    n_nodes = arrays.n_nodes
    offsets, payload_size = _layout(n_nodes)
    payload = bytearray(payload_size)
    for (name, dtype, _extra), off in zip(_ARRAYS, offsets):
        data = np.ascontiguousarray(getattr(arrays, name), dtype=dtype).tobytes()
        payload[off:off + len(data)] = data
    head = _pack(header, n_nodes, payload_size, b"\0" * 32)
    digest = hashlib.sha256(head + payload).digest()
    return _pack(header, n_nodes, payload_size, digest) + bytes(payload)


def _pack(h: TokenMapHeader, n_nodes: int, payload_size: int, checksum: bytes) -> bytes:
    fp = h.fingerprint.encode("ascii")[:16].ljust(16, b"\0")
    raw = _HEADER.pack(MAGIC, h.version, h.size, fp, h.vocab_size, h.n, h.max_len, h.begin, h.eot, h.flags,
                       n_nodes, h.n_sequences, h.n_tokens, h.min_count, h.prefix_min_count, h.top_k, payload_size,
                       checksum)
    if h.language:
        raw += h.language.encode("ascii").ljust(LANGUAGE_BYTES, b"\0")
    return raw.ljust(h.size, b"\0")


def load(path: str | os.PathLike[str], fingerprint: str | None = None, vocab_size: int | None = None) -> TokenMap:
    """Map a token map file into memory after checking magic, version, size, checksum and tokenizer."""
    where = str(path)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - the mapping outlives this function
    except FileNotFoundError:
        raise TokenMapError("token map file not found", where=where,
                            hint="check the path, or build one with: specwhisper tokenmap build") from None
    except OSError as exc:
        raise TokenMapError(f"cannot read the token map: {exc.strerror or exc}", where=where) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size < HEADER_SIZE:
            raise TokenMapError(f"not a token map, or truncated: {size} bytes is shorter than the header",
                                where=where, hint=_REBUILD)
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    fields = _HEADER.unpack_from(buf[:HEADER_SIZE])
    (magic, version, header_size, fp, vocab, n, max_len, begin, eot, flags, n_nodes, n_seq, n_tok, min_count,
     prefix_min, top_k, payload_size, checksum) = fields
    if magic != MAGIC:
        raise TokenMapError("not a specwhisper token map (wrong magic bytes)", where=where, hint=_REBUILD)
    if version > FORMAT_VERSION:
        raise TokenMapError(f"token map format version {version} is newer than this specwhisper reads "
                            f"(up to {FORMAT_VERSION})", where=where, hint="upgrade specwhisper, or " + _REBUILD)
    if HEADER_SIZES.get(version) != header_size:
        raise TokenMapError(f"unsupported token map format version {version}", where=where, hint=_REBUILD)
    _offsets, expected_payload = _layout(n_nodes) if n_nodes < (1 << 32) else ([], -1)
    if payload_size != expected_payload or n_nodes < 1:
        raise TokenMapError("corrupt token map: header sizes are inconsistent", where=where, hint=_REBUILD)
    if size != header_size + payload_size:
        kind = "truncated" if size < header_size + payload_size else "corrupt (trailing bytes)"
        raise TokenMapError(f"token map is {kind}: {size} bytes, expected {header_size + payload_size}",
                            where=where, hint=_REBUILD)
    head = bytes(buf[:header_size])
    digest = hashlib.sha256(head[:_CHECKSUM_AT] + b"\0" * 32 + head[_CHECKSUM_AT + 32:])
    digest.update(memoryview(buf)[header_size:])
    if digest.digest() != checksum:
        raise TokenMapError("token map is corrupt (checksum mismatch)", where=where, hint=_REBUILD)
    language = _language_in(head, version, where)
    fingerprint_in_file = fp.rstrip(b"\0").decode("ascii", "replace")
    check_vocabulary(fingerprint_in_file, vocab, fingerprint, vocab_size, where)
    arrays = TrieArrays(*(np.frombuffer(buf, dtype=dtype, count=n_nodes + extra, offset=header_size + off)
                          for (_name, dtype, extra), off in zip(_ARRAYS, _offsets)))
    _check_structure(arrays, where)
    header = TokenMapHeader(fingerprint_in_file, vocab, n, max_len, begin, eot, n_seq, n_tok, min_count, prefix_min,
                            top_k, flags, language)
    return TokenMap(header, arrays, where, _buffer=buf)


def check_vocabulary(map_fingerprint: str, map_vocab: int, fingerprint: str | None, vocab_size: int | None,
                     where: str) -> None:
    """Refuse a map built for another tokenizer (``fingerprint``, ``vocab_size``: the model's)."""
    if fingerprint is not None and fingerprint != map_fingerprint:
        raise _foreign_tokenizer(map_fingerprint, fingerprint, where)
    if vocab_size is not None and vocab_size != map_vocab:
        raise TokenMapError(f"token map was built for a vocabulary of {map_vocab} tokens, this model has {vocab_size}",
                            where=where, hint=_REBUILD)


def _foreign_tokenizer(map_fingerprint: str, fingerprint: str, where: str) -> TokenMapError:
    """The refusal of a map of another tokenizer, naming the pulled models it fits where there are
    any: "use --model tiny.en" is what to do, two hashes alone are not (looked up only here: ~0.3 s
    a model)."""
    from .owners import models_with_fingerprint, owner_phrase

    hashes = f"fingerprint {map_fingerprint}, this model's is {fingerprint}"
    names = models_with_fingerprint(map_fingerprint)
    if not names:
        return TokenMapError(f"token map was built for another tokenizer ({hashes})", where=where,
                             hint="use a map built with this model, or " + _REBUILD)
    models = " or ".join(f"--model {name}" for name in names)
    return TokenMapError(f"token map was built for another tokenizer, {owner_phrase(names)} ({hashes})",
                         where=where, hint=f"use {models} with this map, or a map built with this model, or "
                                           + _REBUILD)


def _language_in(head: bytes, version: int, where: str) -> str | None:
    """The language code of a version 2 header (None for version 1)."""
    if version < 2:
        return None
    raw = head[HEADER_SIZE:HEADER_SIZE + LANGUAGE_BYTES].rstrip(b"\0")
    if not re.fullmatch(rb"[a-z]{2,8}", raw):
        raise TokenMapError(f"corrupt token map: language field {raw!r} is not a language code", where=where,
                            hint=_REBUILD)
    return raw.decode("ascii")


def _check_structure(a: TrieArrays, where: str) -> None:
    """Cheap invariants, so a map that passes the checksum but was written wrongly cannot crash lookups."""
    m = a.n_nodes
    lo = a.child_lo
    if int(lo[0]) != min(1, m) or int(lo[-1]) != m or (m > 1 and bool(np.any(lo[1:] < lo[:-1]))):
        raise TokenMapError("corrupt token map: child index out of order", where=where, hint=_REBUILD)
    if m and (int(a.best.max()) >= m or int(a.best.min()) < -1):
        raise TokenMapError("corrupt token map: best-child index out of range", where=where, hint=_REBUILD)
