"""Transcripts -> token map: tokenise as the model emits text, count contexts and continuations, prune.

What the model emits for an utterance is ``SOT .. notimestamps`` (the prompt), then " Turn on the
lights." (first token with a leading space, as a rule), then EOT. So each transcript becomes
``[BEGIN] + encode(" " + text) + [EOT]`` with BEGIN = the prompt's last token: drafts can start right
after the prompt and end where utterances end. The variant without the leading space is counted
too, but only its windows that differ from the main form (its first word), so other counts do not
double.

A map also records the language of its transcripts (``language``, "en" by default; None records
none): transcribing with the map then decodes in that language unless one is given, where
detection on a short command is a guess (see ``format``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from specwhisper.errors import TokenMapError

from .format import HEADER_SIZES, TokenMap, TokenMapHeader, encoded_size
from .trie import assemble, build_levels, disassemble, filter_levels, merge_levels, nodes_within, windows_for

DEFAULT_N = 3
DEFAULT_MAX_LEN = 6
DEFAULT_MIN_COUNT = 2
DEFAULT_PREFIX_MIN_COUNT = 1
DEFAULT_TOP_K = 8
DEFAULT_BUDGET = 64 * 1024 * 1024
DEFAULT_LANGUAGE = "en"  # the language of the transcripts unless told (None or "none": no language recorded)
UNLESS_TOLD = "default"  # build_token_map's language when none is given: en, once the transcripts are asked
ASKED_LINES = 10_000  # transcripts asked whether they are English (a corpus may be a stream of millions)
MAX_DEPTH = 32  # n + max_len; deeper n-gram paths cost space and never match held-out speech
BYTES_PER_NODE = 16

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class BuildParams:
    """Validated builder settings (``top_k`` None: no per-context limit)."""

    n: int = DEFAULT_N
    max_len: int = DEFAULT_MAX_LEN
    min_count: int = DEFAULT_MIN_COUNT
    prefix_min_count: int = DEFAULT_PREFIX_MIN_COUNT
    top_k: int | None = DEFAULT_TOP_K
    budget_bytes: int = DEFAULT_BUDGET

    def __post_init__(self) -> None:
        checks = (
            (self.n >= 1, "--n", "context length n must be at least 1"),
            (self.max_len >= 1, "--max-len", "continuation length must be at least 1"),
            (self.n + self.max_len <= MAX_DEPTH, "--n/--max-len", f"n + max_len must be at most {MAX_DEPTH}"),
            (self.min_count >= 1, "--min-count", "minimum count must be at least 1"),
            (self.prefix_min_count >= 1, "--prefix-min-count", "minimum count must be at least 1"),
            (self.top_k is None or self.top_k >= 1, "--top-k", "top-k must be at least 1"),
            (self.budget_bytes >= encoded_size(64), "--budget", f"the size budget must be at least "
                                                                f"{encoded_size(64)} bytes"),
        )
        for ok, where, what in checks:
            if not ok:
                raise TokenMapError(what, where=where)


class Sequences:
    """Tokenised transcripts laid end to end, each ``[BEGIN, t1 .. tm, EOT]``, with window limits."""

    def __init__(self, begin: int, eot: int) -> None:
        self.begin, self.eot = begin, eot
        self.flat: list[int] = []
        self.lengths: list[int] = []
        self.extra: list[int] = []  # -1: count every window; k: only the BEGIN window and those starting at t1..tk
        self.n_sequences = 0
        self.n_tokens = 0

    def add(self, tokens: Sequence[int], variant: Sequence[int] | None = None) -> None:
        """One transcript (its main tokens, and optionally the no-leading-space variant)."""
        tokens = [t for t in tokens if t < self.eot]
        if not tokens:
            return
        self._append(tokens, -1)
        self.n_sequences += 1
        self.n_tokens += len(tokens)
        if variant is not None:
            variant = [t for t in variant if t < self.eot]
            if variant and variant != tokens:
                self._append(variant, max(len(variant) - _common_suffix(tokens, variant), 1))

    def _append(self, tokens: Sequence[int], extra: int) -> None:
        self.flat.append(self.begin)
        self.flat.extend(tokens)
        self.flat.append(self.eot)
        self.lengths.append(len(tokens) + 2)
        self.extra.append(extra)


def _common_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def tokenize_transcripts(texts: Iterable[str], tokenizer, total: int | None = None,
                         progress: Progress | None = None, variants: bool = True) -> Sequences:
    """Tokenise each transcript as the model would emit it (see module docstring)."""
    seqs = Sequences(tokenizer.special.no_timestamps, tokenizer.special.eot)
    for i, text in enumerate(texts):
        text = text.strip()
        if text:
            seqs.add(tokenizer.encode(" " + text), tokenizer.encode(text) if variants else None)
        if progress is not None and (i & 1023) == 1023:
            progress(i + 1, total or 0)
    if progress is not None:
        progress(total or seqs.n_sequences, total or 0)
    return seqs


def check_language(language: str | None, tokenizer=None) -> str | None:
    """A map's language as recorded: a Whisper language code, or None for "none" or None.
    With ``tokenizer``, the code must be one its model transcribes (English-only models: en)."""
    from specwhisper.errors import OptionError
    from specwhisper.tokenizer import language_code

    if language is None or (isinstance(language, str) and language.strip().lower() == "none"):
        return None
    try:
        language = language_code(language)  # "EN" and "English" as "en"; "auto" (detect) as none
    except OptionError:
        raise TokenMapError(f"unknown language {language!r} for the transcripts", where="--language",
                            hint="use a Whisper language code such as en, de, es, or its English name (or none "
                                 "to record no language)") from None
    if language is None:
        return None
    if tokenizer is not None and not getattr(tokenizer, "multilingual", True) and language != "en":
        raise TokenMapError(f"language {language!r}: this model transcribes English only", where="--language",
                            hint="use --language en, or build the map for a multilingual model")
    return language


def build_from_sequences(seqs: Sequences, params: BuildParams, fingerprint: str, vocab_size: int,
                         flags: int = 0, base: TokenMap | None = None, language: str | None = None) -> TokenMap:
    """Count, prune and lay out; with ``base``, add its counts first (a learned map merged into a
    static one, whose language it keeps unless ``language`` is given)."""
    flat = np.asarray(seqs.flat, dtype=np.int64)
    starts, lengths = windows_for(seqs.lengths, params.n + params.max_len, seqs.extra)
    levels = build_levels(flat, starts, lengths, seqs.begin, min_count=params.min_count,
                          prefix_min_count=params.prefix_min_count, top_k=params.top_k)
    root_count = int(starts.size)
    n_sequences, n_tokens = seqs.n_sequences, seqs.n_tokens
    if base is not None:
        levels = merge_levels(disassemble(base.arrays), levels)
        root_count += int(base.count(0))
        n_sequences += base.header.n_sequences
        n_tokens += base.header.n_tokens
    if base is not None and language is None:
        language = base.header.language
    budget_nodes = (params.budget_bytes - HEADER_SIZES[2 if language else 1]) // BYTES_PER_NODE
    threshold = nodes_within(levels, budget_nodes)
    if threshold > 1:
        levels = filter_levels(levels, threshold)
    arrays = assemble(levels, root_count)
    header = TokenMapHeader(fingerprint=fingerprint, vocab_size=vocab_size, n=params.n, max_len=params.max_len,
                            begin=seqs.begin, eot=seqs.eot, n_sequences=n_sequences, n_tokens=n_tokens,
                            min_count=max(params.min_count, threshold),
                            prefix_min_count=max(params.prefix_min_count, threshold), top_k=params.top_k or 0,
                            flags=flags, language=language)
    return TokenMap(header, arrays)


def build_token_map(texts: Iterable[str], tokenizer, n: int = DEFAULT_N, max_len: int = DEFAULT_MAX_LEN,
                    min_count: int = DEFAULT_MIN_COUNT, top_k: int | None = DEFAULT_TOP_K,
                    budget_bytes: int = DEFAULT_BUDGET, prefix_min_count: int = DEFAULT_PREFIX_MIN_COUNT,
                    progress: Progress | None = None, language: str | None = UNLESS_TOLD) -> TokenMap:
    """Build a map from transcripts (one utterance each). Deterministic: same input, same bytes.

    ``n``: longest context; ``max_len``: longest continuation stored after it; ``min_count``: fewer
    occurrences than this and an n-gram node is dropped; ``prefix_min_count``: the same for whole-
    utterance prefixes (1 keeps every transcript recallable); ``top_k``: continuations kept per
    context; ``budget_bytes``: the file size cap (rarest nodes go first); ``language``: the
    language of the transcripts, recorded in the map (a Whisper code; None or "none": no language;
    left out: en, unless the first ``ASKED_LINES`` transcripts are plainly of another script, an
    error, as ``tokenmap build`` without ``--language`` asks: a Japanese map recorded as English
    turned transcription into translation).
    """
    params = BuildParams(n, max_len, min_count, prefix_min_count, top_k, budget_bytes)
    if language == UNLESS_TOLD:
        from .corpus import english_unless_plainly_not

        if isinstance(texts, Sequence):
            head = list(texts[:ASKED_LINES])
        else:  # an iterator: what is asked is put back in front
            texts = iter(texts)
            head = list(itertools.islice(texts, ASKED_LINES))
            texts = itertools.chain(head, texts)
        language = english_unless_plainly_not(head, option="language")
    language = check_language(language, tokenizer)
    texts = list(texts) if progress is not None and not isinstance(texts, list) else texts
    total = len(texts) if isinstance(texts, list) else None
    seqs = tokenize_transcripts(texts, tokenizer, total, progress)
    if seqs.n_sequences == 0:
        raise TokenMapError("no transcripts to build from (all empty)", where="transcripts",
                            hint="pass text files with one transcript per line, or JSONL manifests with a 'text' field")
    return build_from_sequences(seqs, params, tokenizer.fingerprint(), tokenizer.vocab_size, language=language)
