"""The token-map drafter's next-token model: every context of ``[BEGIN] + tokens`` in the maps,
blended Witten-Bell style from general to specific (see ``tokenmap_drafter`` for what the
contexts are and why). Kept apart from the drafter protocol: this is the part that walks the
tries and weighs their counts; the drafter decides how far to draft and what to learn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_TAIL = 3  # recent tokens kept for gapped contexts


@dataclass(frozen=True)
class ContextState:
    """What is known about ``[BEGIN] + tokens``, per map (static first, then learned)."""

    ctx: tuple[dict[int, int], ...]  # n-gram contexts: length -> node
    prefix: tuple[int, ...]  # node of the whole history from BEGIN, -1 once no past utterance began so
    anchor: tuple[int, ...]  # deepest prefix node seen at least ``anchor_min`` times (template anchor)
    anchor_len: tuple[int, ...]  # its length from BEGIN
    length: int  # len([BEGIN] + tokens)
    tail: tuple[int, ...]  # the last few tokens


class BlendedContexts:
    """Next-token probabilities over static and learned maps; remembers the contexts of the last
    history asked about, so a history that only grew is extended rather than walked again."""

    def __init__(self, maps: list, weights: list[float], recall_weights: list[float], *, backoff: float,
                 anchor_min: int, gap_tail: int, gap_backoff: float) -> None:
        self.maps, self.weights, self.recall_weights = maps, weights, recall_weights
        self.recall_maps = list(maps)  # the prefix level's view of each map (a window may weigh it)
        self.backoff, self.anchor_min, self.gap_tail, self.gap_backoff = backoff, anchor_min, gap_tail, gap_backoff
        self.gap_cache: dict = {}
        self.reset()

    def reset(self) -> None:
        """Forget the remembered history (a new window, or a learned map that changed)."""
        self._cache_tokens: list[int] = []
        self._cache_state = self.initial()

    def end_window(self, learned: bool) -> None:
        """Back to the maps' own views for the next window; ``learned``: a learned map took an
        utterance, so the gapped lookups cached from it are stale too."""
        if learned:
            self.gap_cache.clear()
        self.reset()
        self.recall_maps = list(self.maps)

    def initial(self) -> ContextState:
        prefix = tuple(m.begin_node for m in self.maps)
        anchor = tuple(p if p >= 0 and m.count(p) >= self.anchor_min else -1 for m, p in zip(self.maps, prefix))
        return ContextState(tuple({} for _ in self.maps), prefix, anchor, tuple(1 for _ in self.maps), 1, ())

    def state_for(self, tokens: Sequence[int], keep: bool = True) -> ContextState:
        """Contexts of ``[BEGIN] + tokens``; extends the previous call's state when the history only grew."""
        cached = self._cache_tokens
        n = len(cached)
        if len(tokens) >= n and list(tokens[:n]) == cached:
            state = self._cache_state
            for t in tokens[n:]:
                state = self.extend(state, t)
        else:
            state = self.initial()
            for t in tokens:
                state = self.extend(state, t)
        if keep:
            self._cache_tokens = list(tokens)
            self._cache_state = state
        return state

    def extend(self, state: ContextState, token: int) -> ContextState:
        ctxs, prefixes, anchors, anchor_lens = [], [], [], []
        length = state.length + 1
        for i, m in enumerate(self.maps):
            nxt: dict[int, int] = {}
            for n, node in state.ctx[i].items():
                kid = m.child(node, token)
                if kid >= 0 and m.fanout(kid):
                    nxt[n + 1] = kid
            kid = m.child(0, token)
            if kid >= 0 and m.fanout(kid):
                nxt[1] = kid
            ctxs.append(nxt)
            p = state.prefix[i]
            p = m.child(p, token) if p >= 0 else -1
            prefixes.append(p)
            if p >= 0 and m.count(p) >= self.anchor_min:
                anchors.append(p)
                anchor_lens.append(length)
            else:
                anchors.append(state.anchor[i])
                anchor_lens.append(state.anchor_len[i])
        return ContextState(tuple(ctxs), tuple(prefixes), tuple(anchors), tuple(anchor_lens), length,
                            (state.tail + (token,))[-_TAIL:])

    def _gapped(self, state: ContextState) -> tuple[list[dict[int, int]], list[int]]:
        """Per map: followers and count of the longest recent tail found below the template anchor."""
        out_f: list[dict[int, int]] = []
        out_c: list[int] = []
        for i, m in enumerate(self.maps):
            anchor, prefix = state.anchor[i], state.prefix[i]
            after = state.length - state.anchor_len[i]
            found: tuple[dict[int, int], int] = ({}, 0)
            # anchored at BEGIN alone the gap would span every utterance: the n-grams already say that
            if anchor >= 0 and anchor != prefix and after > 0 and self.gap_tail > 0 and state.anchor_len[i] > 1:
                for q in range(min(self.gap_tail, after, len(state.tail)), 0, -1):
                    key = (i, anchor, state.tail[-q:])
                    hit = self.gap_cache.get(key)
                    if hit is None:
                        if len(self.gap_cache) > 4096:
                            self.gap_cache.clear()
                        hit = self.gap_cache[key] = m.below(anchor, state.tail[-q:])
                    if hit[1] > 0:
                        found = hit
                        break
            out_f.append(found[0])
            out_c.append(found[1])
        return out_f, out_c

    def predict(self, state: ContextState) -> tuple[int | None, float]:
        """The most likely next token and its blended probability."""
        maps, weights = self.maps, self.weights
        gap_f, gap_c = self._gapped(state)
        candidates: set[int] = set()
        for i, (m, recall) in enumerate(zip(maps, self.recall_maps)):
            best = [(m, m.best(node)) for node in state.ctx[i].values()]
            if state.prefix[i] >= 0:
                best.append((recall, recall.best(state.prefix[i])))
            for view, b in best:
                if b >= 0:
                    candidates.add(view.token_of(b))
            if gap_f[i]:
                candidates.add(max(gap_f[i].items(), key=lambda kv: (kv[1], -kv[0]))[0])
        if not candidates:
            for m in maps:
                b = m.best(0)
                if b >= 0:
                    candidates.add(m.token_of(b))
        if not candidates:
            return None, 0.0
        lengths = sorted({n for ctx in state.ctx for n in ctx})
        levels = [[(m, w, ctx.get(n, -1)) for m, w, ctx in zip(maps, weights, state.ctx)] for n in lengths]
        # the prefix memory, one level per map from static to learned: a recalled past utterance of
        # this user's is more specific than the domain's thousand utterances that began alike
        prefix_levels = [[(m, w, p)] for m, w, p in zip(self.recall_maps, self.recall_weights, state.prefix)]
        gap_total = sum(w * c for w, c in zip(weights, gap_c))
        gap_fan = len({t for f in gap_f for t in f})
        gamma = self.backoff
        total0 = sum(w * m.count(0) for m, w in zip(maps, weights))
        best_tok, best_p = None, -1.0
        for tok in sorted(candidates):
            hit = sum(w * m.count(k) for m, w in zip(maps, weights) if (k := m.child(0, tok)) >= 0)
            p = hit / total0 if total0 else 0.0
            for level in levels:
                p = _blend(level, tok, p, gamma)
            if gap_total:
                c_tok = sum(w * f.get(tok, 0) for w, f in zip(weights, gap_f))
                lam = self.gap_backoff * gap_fan
                p = (c_tok + lam * p) / (gap_total + lam)
            for level in prefix_levels:
                p = _blend(level, tok, p, gamma)
            if p > best_p:
                best_tok, best_p = tok, p
        return best_tok, best_p


def _blend(level: list, tok: int, p_lower: float, gamma: float) -> float:
    """One Witten-Bell step: this level's counts, backing off to ``p_lower`` by its fan-out."""
    c_tot = fan = c_tok = 0.0
    for m, w, node in level:
        if node < 0 or not m.fanout(node):
            continue
        c_tot += w * m.count(node)
        fan += m.fanout(node)
        kid = m.child(node, tok)
        if kid >= 0:
            c_tok += w * m.count(kid)
    if not c_tot:
        return p_lower
    lam = gamma * fan
    return (c_tok + lam * p_lower) / (c_tot + lam)
