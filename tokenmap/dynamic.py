"""The dynamic map: the same count trie as a file map, growing in memory as the engine transcribes.

Like llama.cpp's dynamic n-gram cache beside its static one: every finished window's tokens are
counted (whole-utterance path from the begin marker, plus n-gram windows of ``n + max_len``), so
the next time the user says the same thing it is drafted whole. ``to_token_map`` lays it out in
the file format (optionally merged into a static map) for ``--learn-save``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .build import BuildParams, Sequences, build_from_sequences
from .format import FLAG_LEARNED, TokenMap
from .trie import PREFIX_DEPTH


class DynamicTrie:
    """Insert-only count trie with the lookups of :class:`TokenMap` (node 0 is the root)."""

    def __init__(self, n: int, max_len: int, begin: int, eot: int) -> None:
        self.n, self.max_len, self.begin, self.eot = n, max_len, begin, eot
        self._tok: list[int] = [-1]
        self._cnt: list[int] = [0]
        self._kids: list[dict[int, int]] = [{}]
        self._best: list[int] = [-1]
        self.sequences = Sequences(begin, eot)
        self.begin_node = -1

    @property
    def n_nodes(self) -> int:
        return len(self._tok)

    def add(self, tokens: Sequence[int]) -> None:
        """Count one utterance (text tokens, EOT excluded)."""
        text = [t for t in tokens if t < self.eot]
        if not text:
            return
        self.sequences.add(text)
        seq = [self.begin, *text, self.eot]
        self._insert(seq[:PREFIX_DEPTH])
        depth = self.n + self.max_len
        for p in range(1, len(seq) - 1):
            self._insert(seq[p:p + depth])
        self.begin_node = self._kids[0].get(self.begin, -1)

    def _insert(self, path: Sequence[int]) -> None:
        tok, cnt, kids, best = self._tok, self._cnt, self._kids, self._best
        node = 0
        cnt[0] += 1
        for t in path:
            kid = kids[node].get(t)
            if kid is None:
                kid = len(tok)
                tok.append(t)
                cnt.append(0)
                kids.append({})
                best.append(-1)
                kids[node][t] = kid
            cnt[kid] += 1
            b = best[node]
            if b != kid and (b < 0 or cnt[kid] > cnt[b] or (cnt[kid] == cnt[b] and t < tok[b])):
                best[node] = kid
            node = kid

    # --- the TokenMap lookups the drafter uses ------------------------------------------------
    @property
    def depth(self) -> int:
        return self.n + self.max_len

    def find(self, tokens: Sequence[int], start: int = 0) -> int:
        node = start
        for t in tokens:
            node = self._kids[node].get(t, -1)
            if node < 0:
                return -1
        return node

    def child(self, node: int, token: int) -> int:
        return self._kids[node].get(token, -1)

    def count(self, node: int) -> int:
        return self._cnt[node]

    def fanout(self, node: int) -> int:
        return len(self._kids[node])

    def best(self, node: int) -> int:
        return self._best[node]

    def token_of(self, node: int) -> int:
        return self._tok[node]

    def below(self, anchor: int, recent: Sequence[int]) -> tuple[dict[int, int], int]:
        """Followers of ``recent`` anywhere below ``anchor`` (see :meth:`TokenMap.below`)."""
        q = len(recent)
        followers: dict[int, int] = {}
        total = 0
        stack = [(kid, [t]) for t, kid in self._kids[anchor].items()]
        while stack:
            node, path = stack.pop()
            if len(path) >= q and path[-q:] == list(recent):
                total += self._cnt[node]
                for t, kid in self._kids[node].items():
                    followers[t] = followers.get(t, 0) + self._cnt[kid]
            tail = path[-(q - 1):] if q > 1 else []
            stack.extend((kid, tail + [t]) for t, kid in self._kids[node].items())
        return followers, total

    def children(self, node: int) -> list[tuple[int, int, int]]:
        kids = [(t, self._cnt[k], k) for t, k in self._kids[node].items()]
        kids.sort(key=lambda k: (-k[1], k[0]))
        return kids

    # --- to the file format -------------------------------------------------------------------
    def to_token_map(self, fingerprint: str, vocab_size: int, base: TokenMap | None = None,
                     budget_bytes: int | None = None) -> TokenMap:
        """The learned counts as a map (every path kept), merged into ``base`` when given."""
        params = BuildParams(self.n, self.max_len, min_count=1, prefix_min_count=1, top_k=None,
                             **({"budget_bytes": budget_bytes} if budget_bytes else {}))
        return build_from_sequences(self.sequences, params, fingerprint, vocab_size, flags=FLAG_LEARNED, base=base)
