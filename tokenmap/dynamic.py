"""The dynamic map: the same count trie as a file map, growing in memory as the engine transcribes.

Like llama.cpp's dynamic n-gram cache beside its static one: every finished window's tokens are
counted (whole-utterance path from the begin marker, plus n-gram windows of ``n + max_len``), so
the next time the user says the same thing it is drafted whole. ``to_token_map`` lays it out in
the file format (optionally merged into a static map) for ``--learn-save``.

Each whole-utterance path also keeps how long the speech of every utterance through it lasted, so
that :class:`LengthWeightedRecall` can tell which past utterance a repeat is: past commands that
begin alike ("Can you turn on the lights." / "Can you navigate to 54 Lincoln Avenue, Denver?") part
after a few tokens, and the one said about as long as this window is the one to draft.

The map is bounded, since an engine that learns may run for days: it holds the last
``max_utterances`` utterances learned (``DEFAULT_MAX_UTTERANCES``, 2,048) in at most
``max_nodes`` trie nodes (``DEFAULT_MAX_NODES``, 131,072: about 40 MB in Python objects). Past
either, the oldest utterances are forgotten first, their counts taken back out of the trie
exactly as they went in, so what remains equals a map that learned only the utterances held. A
command said again is learned again, so the ones a user keeps saying stay (least recently used
goes first). Drafts only change speed, never text: forgetting costs drafts, not exactness.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence

from .build import BuildParams, Sequences, build_from_sequences
from .format import FLAG_LEARNED, TokenMap
from .trie import PREFIX_DEPTH

DEFAULT_MAX_UTTERANCES = 2048
DEFAULT_MAX_NODES = 1 << 17
_STALE = -2  # a node's best child, not known since a child's count fell (found again when asked)


class DynamicTrie:
    """Count trie with the lookups of :class:`TokenMap` (node 0 is the root), bounded by
    ``max_utterances`` and ``max_nodes`` (see module docstring)."""

    def __init__(self, n: int, max_len: int, begin: int, eot: int, *,
                 max_utterances: int = DEFAULT_MAX_UTTERANCES, max_nodes: int = DEFAULT_MAX_NODES) -> None:
        if max_utterances < 1 or max_nodes < 1:
            raise ValueError(f"learned map caps must be positive, got {max_utterances} utterances, {max_nodes} nodes")
        self.n, self.max_len, self.begin, self.eot = n, max_len, begin, eot
        self.max_utterances, self.max_nodes = max_utterances, max_nodes
        self._tok: list[int] = [-1]
        self._cnt: list[int] = [0]
        self._kids: list[dict[int, int]] = [{}]
        self._best: list[int] = [-1]
        self._free: list[int] = []  # indices of forgotten nodes, reused before the lists grow
        self._held: deque[tuple[tuple[int, ...], float | None]] = deque()  # (text, speech s), oldest first
        self.begin_node = -1
        self.speech: dict[int, list[float]] = {}  # prefix-path node -> speech seconds of the utterances through it
        self.learned = 0  # utterances ever learned (forgotten ones included)
        self.forgotten = 0

    @property
    def n_nodes(self) -> int:
        """Nodes in use (the root included)."""
        return len(self._tok) - len(self._free)

    @property
    def n_utterances(self) -> int:
        """Utterances held now (a repeat counts each time)."""
        return len(self._held)

    @property
    def sequences(self) -> Sequences:
        """The utterances held, oldest first, as the builder takes them."""
        seqs = Sequences(self.begin, self.eot)
        for text, _ in self._held:
            seqs.add(text)
        return seqs

    def add(self, tokens: Sequence[int], speech_s: float | None = None) -> None:
        """Count one utterance (text tokens, EOT excluded) and, if known, how long its speech lasted;
        then forget the oldest utterances while a cap is exceeded (the newest always stays)."""
        text = tuple(t for t in tokens if t < self.eot)
        if not text:
            return
        speech = float(speech_s) if speech_s is not None and speech_s > 0 else None
        for path, prefix in self._paths(text):
            nodes = self._insert(path)
            if prefix and speech is not None:
                for node in nodes[1:]:  # below the begin marker
                    self.speech.setdefault(node, []).append(speech)
        self._held.append((text, speech))
        self.learned += 1
        while len(self._held) > 1 and (len(self._held) > self.max_utterances or self.n_nodes > self.max_nodes):
            self._forget(*self._held.popleft())
        self.begin_node = self._kids[0].get(self.begin, -1)

    def _paths(self, text: tuple[int, ...]) -> Iterator[tuple[Sequence[int], bool]]:
        """The paths one utterance counts: (path, whether it is the whole-utterance prefix path)."""
        seq = [self.begin, *text, self.eot]
        yield seq[:PREFIX_DEPTH], True
        depth = self.n + self.max_len
        for p in range(1, len(seq) - 1):
            yield seq[p:p + depth], False

    def _insert(self, path: Sequence[int]) -> list[int]:
        """Count ``path`` from the root; returns the nodes it passed, in order."""
        tok, cnt, kids, best = self._tok, self._cnt, self._kids, self._best
        node = 0
        cnt[0] += 1
        visited = []
        for t in path:
            kid = kids[node].get(t)
            if kid is None:
                kid = self._new_node(t)
                kids[node][t] = kid
            cnt[kid] += 1
            b = best[node]
            if b != kid and b != _STALE and (b < 0 or cnt[kid] > cnt[b] or (cnt[kid] == cnt[b] and t < tok[b])):
                best[node] = kid
            node = kid
            visited.append(node)
        return visited

    def _new_node(self, token: int) -> int:
        if self._free:
            kid = self._free.pop()
            self._tok[kid], self._cnt[kid], self._kids[kid], self._best[kid] = token, 0, {}, -1
            return kid
        self._tok.append(token)
        self._cnt.append(0)
        self._kids.append({})
        self._best.append(-1)
        return len(self._tok) - 1

    def _forget(self, text: tuple[int, ...], speech: float | None) -> None:
        """Take one learned utterance back out: the counts ``add`` made, node for node."""
        cnt, kids, best = self._cnt, self._kids, self._best
        for path, prefix in self._paths(text):
            cnt[0] -= 1
            parent = 0
            for i, t in enumerate(path):
                node = kids[parent][t]
                cnt[node] -= 1
                if prefix and speech is not None and i > 0:  # below the begin marker, as ``add`` kept them
                    lengths = self.speech[node]
                    lengths.remove(speech)
                    if not lengths:
                        del self.speech[node]
                if cnt[node] == 0:  # no utterance passes here any more: nor below (counts only fall)
                    del kids[parent][t]
                    self._drop_subtree(node)
                if best[parent] == node:  # only this child fell: the best may have changed (the
                    best[parent] = _STALE  # root has thousands of children: look again only when asked)
                if cnt[node] == 0:
                    break
                parent = node
        self.forgotten += 1

    def _drop_subtree(self, node: int) -> None:
        """Free ``node`` and what lies below it (every count there is 0 once ``node``'s is)."""
        stack = [node]
        while stack:
            n = stack.pop()
            stack.extend(self._kids[n].values())
            self._kids[n] = {}
            self._best[n] = -1
            self.speech.pop(n, None)
            self._free.append(n)

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
        """The child with the highest count (ties: the lowest token), or -1."""
        b = self._best[node]
        if b == _STALE:
            cnt, tok = self._cnt, self._tok
            b = self._best[node] = min(self._kids[node].values(), key=lambda k: (-cnt[k], tok[k]), default=-1)
        return b

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


class LengthWeightedRecall:
    """The learned prefix memory as seen from one window: each past utterance counts by how close
    its speech length was to this window's, ``exp(-(ln(d / d_now))**2 / (2 sigma**2))``.

    Offers the lookups the drafter's prefix level uses (``count``, ``fanout``, ``child``, ``best``,
    ``token_of``). Utterances learned without a length count fully, as in the plain trie. A first
    hearing matches no past length, so its recall counts vanish and the n-gram levels decide.
    """

    def __init__(self, trie: DynamicTrie, speech_s: float, sigma: float) -> None:
        self.trie = trie
        self.log_now = math.log(speech_s)
        self.inv = 1.0 / (2.0 * sigma * sigma)
        self._counts: dict[int, float] = {}
        self._best: dict[int, int] = {}

    def count(self, node: int) -> float:
        c = self._counts.get(node)
        if c is None:
            raw = self.trie.count(node)
            lengths = self.trie.speech.get(node, ())
            c = raw - len(lengths) + sum(math.exp(-self.inv * (math.log(d) - self.log_now) ** 2) for d in lengths)
            self._counts[node] = c
        return c

    def fanout(self, node: int) -> int:
        return self.trie.fanout(node)

    def child(self, node: int, token: int) -> int:
        return self.trie.child(node, token)

    def token_of(self, node: int) -> int:
        return self.trie.token_of(node)

    def best(self, node: int) -> int:
        b = self._best.get(node)
        if b is None:
            kids = self.trie.children(node)  # by raw count, then token: ties keep the trie's order
            b = max(kids, key=lambda k: self.count(k[2]))[2] if kids else -1
            self._best[node] = b
        return b
