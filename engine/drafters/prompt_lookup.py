"""Prompt lookup: draft what followed the latest earlier occurrence of the last n tokens.

Searches the user's initial prompt / hotwords, the previous windows' text and the tokens decoded
so far in this window (n from ``max_ngram`` down to 1). No model, no training: it pays where
text repeats itself (long-form speech, lists, read-back of names).
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import WindowContext


class PromptLookupDrafter:
    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._corpus: list[int] = []
        self._base = 0  # corpus length before this window's tokens
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> latest start with a token after it
        self._indexed_until = 0

    def begin(self, window: WindowContext) -> None:
        self._corpus = list(window.initial_prompt_tokens) + list(window.previous_tokens)
        self._base = len(self._corpus)
        self._index = {}
        self._indexed_until = 0
        self._extend_index()

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        if k <= 0 or not tokens:
            return []
        corpus = self._corpus
        del corpus[self._base:]
        corpus.extend(tokens)
        if self._indexed_until > len(corpus) - 1:
            self._rebuild()
        self._extend_index()
        for n in range(min(self.max_ngram, len(corpus)), self.min_ngram - 1, -1):
            start = self._index.get(tuple(corpus[-n:]))
            if start is not None:
                return corpus[start + n:start + n + k]
        return []

    def observe(self, n_accepted: int) -> None:
        pass

    def end(self, tokens: Sequence[int]) -> None:
        pass

    def _extend_index(self) -> None:
        """Register every n-gram that now has a following token (so the current suffix never matches itself)."""
        corpus = self._corpus
        last = len(corpus) - 1  # n-grams must end before this position
        for end in range(self._indexed_until, last):
            for n in range(self.min_ngram, self.max_ngram + 1):
                s = end - n + 1
                if s >= 0:
                    self._index[tuple(corpus[s:end + 1])] = s
        self._indexed_until = max(self._indexed_until, last)

    def _rebuild(self) -> None:
        self._index = {}
        self._indexed_until = 0
