"""The cheapest plausible guess: the most frequent follower of the last token, learned online.

Batch-invariant calls carry at least ``row_floor`` rows; rows no drafter filled would be wasted,
so they carry this guess instead (after sentence-final punctuation, EOT).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from ..tokenizer import WhisperTokenizer


class BigramGuesser:
    """Most frequent next token after the previous one, from this engine's own outputs."""

    name = "bigram"

    def __init__(self, tokenizer: WhisperTokenizer) -> None:
        self._eot = tokenizer.special.eot
        self._followers: dict[int, Counter] = defaultdict(Counter)
        self._best: dict[int, int] = {}
        for mark in (".", "?", "!"):
            for tid in tokenizer.encode(mark):
                self._best[tid] = self._eot
        comma = tokenizer.encode(",")
        self._default = comma[0] if comma else self._eot

    def __call__(self, tokens: Sequence[int]) -> int:
        return self._best.get(tokens[-1], self._default) if tokens else self._default

    def learn(self, tokens: Sequence[int]) -> None:
        seq = list(tokens) + [self._eot]
        for a, b in zip(seq, seq[1:]):
            counter = self._followers[a]
            counter[b] += 1
            self._best[a] = counter.most_common(1)[0][0]


def map_then_bigram(tokenmap_drafter, bigram: BigramGuesser) -> Callable[[Sequence[int]], int]:
    """The filler of a speculating window: the token map's most frequent next token where a map
    knows something (``TokenMapDrafter.guess``), else the bigram guess."""
    if tokenmap_drafter is None:
        return bigram

    def guess(tokens: Sequence[int]) -> int:
        g = tokenmap_drafter.guess(tokens)
        return g if g is not None else bigram(tokens)

    return guess
