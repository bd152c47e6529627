"""Count tries as flat arrays: built level by level with numpy, filtered, merged, laid out breadth-first.

A token map is one forward trie of token counts. Under the root hang the 1-token contexts; a path
root -> a -> b -> c counts how often "a b c" occurred. Paths that start at the begin marker are whole
utterances (the prefix memory, depth unbounded up to ``PREFIX_DEPTH``); all others are limited to
``n + max_len`` tokens (a context of up to ``n`` tokens plus a continuation of up to ``max_len``).
Storing continuations as a trie shares their common prefixes, so "ranked continuations per
context" costs one node per distinct (context, continuation prefix) instead of one list per context.

Breadth-first layout with children sorted by token: node 0 is the root, the children of node i are
``child_lo[i]:child_lo[i + 1]`` (binary-searchable by token), ``best[i]`` is its most frequent child
(ties: lower token id), or -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TOKEN_BITS = 20  # token ids fit in 20 bits (Whisper vocabularies have ~52k entries)
PREFIX_DEPTH = 256  # deepest path kept under the begin marker (Whisper emits <= 224 tokens a window)


@dataclass(frozen=True)
class TrieArrays:
    """A laid-out trie: four parallel arrays (see module docstring)."""

    token: np.ndarray  # int32[M]; root's token is -1
    count: np.ndarray  # uint32[M]
    best: np.ndarray  # int32[M]
    child_lo: np.ndarray  # uint32[M + 1]

    @property
    def n_nodes(self) -> int:
        return int(self.token.shape[0])


@dataclass(frozen=True)
class Level:
    """Nodes of one depth, sorted by (parent, token); ``parent`` indexes the level above."""

    parent: np.ndarray  # int64
    token: np.ndarray  # int64
    count: np.ndarray  # int64


def windows_for(seq_lengths: Sequence[int], depth: int,
                extra_starts: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of every counted window in sequences laid end to end.

    Each sequence is [BEGIN, t1 .. tm, EOT]. Its BEGIN window runs to the end (the prefix memory);
    windows starting at t_i (i >= 1) span at most ``depth`` tokens. ``extra_starts[j]`` >= 0 limits
    sequence j to its BEGIN window plus windows starting at t_1 .. t_extra (the no-space variant
    only adds what differs from the main form); -1 means all windows.
    """
    lengths = np.asarray(seq_lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, np.int64)
    starts, lens = offsets, np.minimum(lengths, PREFIX_DEPTH)
    # n-gram windows: positions 1 .. len-2 of every sequence (t_1 .. t_m; EOT starts nothing)
    n_text = np.maximum(lengths - 2, 0)
    if extra_starts is not None:
        limit = np.asarray(extra_starts, dtype=np.int64)
        n_text = np.where(limit >= 0, np.minimum(n_text, limit), n_text)
    total = int(n_text.sum())
    seq_of = np.repeat(np.arange(lengths.size), n_text)
    first = np.repeat(np.cumsum(n_text) - n_text, n_text)
    pos = np.arange(total, dtype=np.int64) - first + 1  # 1-based position inside its sequence
    g_start = offsets[seq_of] + pos
    g_len = np.minimum(depth, lengths[seq_of] - pos)
    return np.concatenate([starts, g_start]), np.concatenate([lens, g_len])


def build_levels(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, begin: int, *, min_count: int,
                 prefix_min_count: int, top_k: int | None) -> list[Level]:
    """Count every window prefix, level by level, pruning as it goes (a dropped node drops its subtree).

    Prefix-memory nodes (under the begin marker) keep everything counted ``prefix_min_count`` times;
    other nodes need ``min_count`` and a rank below ``top_k`` among their siblings (1-token contexts
    are never cut by rank).
    """
    flat = np.asarray(flat, dtype=np.int64)
    levels: list[Level] = []
    node = np.zeros(starts.size, dtype=np.int64)  # local id of each window's node at the level above
    alive = lengths > 0
    in_prefix = flat[starts] == begin if starts.size else np.zeros(0, bool)
    depth = 0
    while alive.any():
        idx = np.nonzero(alive)[0]
        keys = (node[idx] << TOKEN_BITS) | flat[starts[idx] + depth]
        uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        parent, token = uniq >> TOKEN_BITS, uniq & ((1 << TOKEN_BITS) - 1)
        prefix = np.zeros(uniq.size, dtype=bool)
        prefix[inverse] = in_prefix[idx]
        keep = np.where(prefix, counts >= prefix_min_count, counts >= min_count)
        if depth == 0:
            keep |= token == begin
        elif top_k is not None:
            keep &= prefix | (_sibling_rank(parent, token, counts) < top_k)
        new_id = np.cumsum(keep) - 1
        levels.append(Level(parent[keep], token[keep], counts[keep].astype(np.int64)))
        node[idx] = new_id[inverse]
        alive[idx] = keep[inverse] & (lengths[idx] > depth + 1)
        depth += 1
    return levels


def _sibling_rank(parent: np.ndarray, token: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Rank of each node among its siblings by count (descending), ties by token id."""
    order = np.lexsort((token, -count, parent))
    sorted_parent = parent[order]
    group_start = np.searchsorted(sorted_parent, sorted_parent, side="left")
    rank = np.empty(parent.size, dtype=np.int64)
    rank[order] = np.arange(parent.size) - group_start
    return rank


def filter_levels(levels: list[Level], min_count: int) -> list[Level]:
    """Keep nodes counted at least ``min_count`` times (their ancestors always are: counts shrink downwards)."""
    out: list[Level] = []
    remap: np.ndarray | None = None
    for lvl in levels:
        keep = lvl.count >= min_count
        parent = lvl.parent if remap is None else remap[lvl.parent]
        keep &= parent >= 0
        out.append(Level(parent[keep], lvl.token[keep], lvl.count[keep]))
        remap = np.where(keep, np.cumsum(keep) - 1, -1)
        if not keep.any():
            break
    return [lvl for lvl in out if lvl.token.size]


def merge_levels(a: list[Level], b: list[Level]) -> list[Level]:
    """Union of two tries with counts added (the learned map merged into the static one)."""
    out: list[Level] = []
    map_a = map_b = np.zeros(1, dtype=np.int64)  # old local id at the level above -> merged local id
    for depth in range(max(len(a), len(b))):
        la = a[depth] if depth < len(a) else Level(*(np.zeros(0, np.int64),) * 3)
        lb = b[depth] if depth < len(b) else Level(*(np.zeros(0, np.int64),) * 3)
        ka = (map_a[la.parent] << TOKEN_BITS) | la.token
        kb = (map_b[lb.parent] << TOKEN_BITS) | lb.token
        uniq, inverse = np.unique(np.concatenate([ka, kb]), return_inverse=True)
        counts = np.bincount(inverse, weights=np.concatenate([la.count, lb.count]), minlength=uniq.size)
        out.append(Level(uniq >> TOKEN_BITS, uniq & ((1 << TOKEN_BITS) - 1), counts.astype(np.int64)))
        map_a, map_b = inverse[:ka.size], inverse[ka.size:]
    return out


def assemble(levels: list[Level], root_count: int) -> TrieArrays:
    """Lay the levels out breadth-first and index children and best child."""
    sizes = [1] + [lvl.token.size for lvl in levels]
    offsets = np.cumsum([0] + sizes)
    total = int(offsets[-1])
    token = np.full(total, -1, dtype=np.int32)
    count = np.zeros(total, dtype=np.uint32)
    best = np.full(total, -1, dtype=np.int32)
    child_lo = np.zeros(total + 1, dtype=np.uint32)
    count[0] = min(root_count, np.iinfo(np.uint32).max)
    for d, lvl in enumerate(levels):
        lo = int(offsets[d + 1])
        n_parents = sizes[d]
        token[lo:lo + lvl.token.size] = lvl.token
        count[lo:lo + lvl.token.size] = np.minimum(lvl.count, np.iinfo(np.uint32).max)
        first = np.searchsorted(lvl.parent, np.arange(n_parents + 1), side="left")
        child_lo[offsets[d]:offsets[d] + n_parents + 1] = lo + first
        if lvl.token.size:
            order = np.lexsort((lvl.token, -lvl.count, lvl.parent))
            p = lvl.parent[order]
            head = np.ones(p.size, dtype=bool)
            head[1:] = p[1:] != p[:-1]
            best[offsets[d] + p[head]] = lo + order[head]
    child_lo[offsets[-2]:] = total  # the deepest level has no children
    return TrieArrays(token, count, best, child_lo)


def disassemble(trie: TrieArrays) -> list[Level]:
    """The inverse of :func:`assemble`: levels from a breadth-first layout."""
    levels: list[Level] = []
    lo, hi = 0, 1
    child_lo = trie.child_lo.astype(np.int64)
    while True:
        c_lo, c_hi = int(child_lo[lo]), int(child_lo[hi])
        if c_hi <= c_lo:
            return levels
        parent = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(child_lo[lo:hi + 1]))
        levels.append(Level(parent, trie.token[c_lo:c_hi].astype(np.int64), trie.count[c_lo:c_hi].astype(np.int64)))
        lo, hi = c_lo, c_hi


def nodes_within(levels: list[Level], budget_nodes: int) -> int:
    """The smallest count threshold whose surviving trie has at most ``budget_nodes`` nodes (1 = keep all)."""
    if not levels:
        return 1
    counts = np.concatenate([lvl.count for lvl in levels])
    if counts.size + 1 <= budget_nodes:
        return 1
    ordered = np.sort(counts)[::-1]
    room = max(budget_nodes - 1, 0)  # the root always stays
    # nodes with count >= t survive; t = ordered[room] + 1 keeps exactly those strictly above the cut
    return int(ordered[room]) + 1
