"""Drafts from n-gram token maps: a static map built from domain transcripts, a dynamic one learned online.

The history is ``[BEGIN] + tokens`` (BEGIN = the prompt's last token, as the builder counts it).
Contexts, from general to specific:

* n-grams: every suffix of the history up to ``n + max_len - 1`` tokens found in a map;
* the gapped context: once the history leaves every known utterance (a number or name slot:
  "Can you navigate to | 54 Lincoln | Avenue, Denver"), the last tokens are looked up below the
  deepest utterance prefix seen at least ``anchor_min`` times ("Can you navigate to"), so what the
  start of the utterance implies survives the slot (" Avenue" -> ",", "Denver" -> "?");
* the prefix memory: the whole utterance so far, while some past utterance began the same way.

Their next-token counts are blended Witten-Bell style from general to specific: a context seen
often with few distinct followers decides, a rare or flat one (a slot) defers to the ones below,
which is the slot-aware back-off. The blended probability of each drafted token is its
confidence (``last_confidence``); drafting stops when the chance that the draft is still right
falls below ``min_cum``, so slots end drafts, and the text after a slot is drafted again.

Static and learned maps are blended at every level. Learned counts weigh ``learned_weight`` in
the n-gram levels and ``recall_weight`` in the prefix memory: an utterance the user said before is
recalled whole, while a handful of learned utterances does not drown the domain statistics. In the
learned prefix memory each past utterance also counts by how close its speech length was to this
window's (``length_sigma``, on a log scale): where past commands share a start, the one that took
as long to say is drafted, and a new command matches none and falls back to the n-grams.
Defaults were tuned with ``python -m benchmarks.tokenmap_sim``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import TokenMapError
from .base import WindowContext

_TAIL = 3  # recent tokens kept for gapped contexts


@dataclass(frozen=True)
class _State:
    """What is known about ``[BEGIN] + tokens``, per map (static first, then learned)."""

    ctx: tuple[dict[int, int], ...]  # n-gram contexts: length -> node
    prefix: tuple[int, ...]  # node of the whole history from BEGIN, -1 once no past utterance began so
    anchor: tuple[int, ...]  # deepest prefix node seen at least ``anchor_min`` times (template anchor)
    anchor_len: tuple[int, ...]  # its length from BEGIN
    length: int  # len([BEGIN] + tokens)
    tail: tuple[int, ...]  # the last few tokens


class TokenMapDrafter:
    """Implements the drafter protocol over a static :class:`TokenMap` and/or a learned dynamic map."""

    name = "tokenmap"

    def __init__(self, static=None, tokenizer=None, *, learn: bool = False, eot: int | None = None,
                 begin: int | None = None, learned_weight: float = 1.0, recall_weight: float = 64.0,
                 backoff: float = 2.0, min_prob: float = 0.05, min_cum: float = 0.1, anchor_min: int = 30,
                 gap_tail: int = 2, gap_backoff: float = 1.0, static_recall_weight: float | None = None,
                 save_merged: bool = True, length_sigma: float = 0.15, max_learned_utterances: int | None = None,
                 max_learned_nodes: int | None = None) -> None:
        """``max_learned_utterances`` / ``max_learned_nodes``: the learned map's caps (None: the
        defaults of ``tokenmap.dynamic``, 2,048 utterances in at most 131,072 nodes); past them
        the oldest learned utterances are forgotten, so memory stays bounded however long it learns."""
        from specwhisper.tokenmap.build import DEFAULT_MAX_LEN, DEFAULT_N
        from specwhisper.tokenmap.dynamic import DEFAULT_MAX_NODES, DEFAULT_MAX_UTTERANCES, DynamicTrie
        from specwhisper.tokenmap.format import FLAG_LEARNED

        if tokenizer is not None:
            eot = tokenizer.special.eot if eot is None else eot
            begin = tokenizer.special.no_timestamps if begin is None else begin
        if static is not None:
            h = static.header
            eot = h.eot if eot is None else eot
            begin = h.begin if begin is None else begin
            if (eot, begin) != (h.eot, h.begin):
                raise TokenMapError(f"token map uses EOT {h.eot} and begin marker {h.begin}, this model {eot} and "
                                    f"{begin}", where=static.source, hint="use a map built with this model")
        if eot is None or begin is None:
            raise TokenMapError("the token-map drafter needs a map, a tokenizer, or explicit eot/begin ids",
                                where="TokenMapDrafter")
        self.static = static
        self.tokenizer = tokenizer
        self.eot, self.begin_id = int(eot), int(begin)
        self.learn = learn
        self.save_merged = save_merged
        n = static.header.n if static is not None else DEFAULT_N
        max_len = static.header.max_len if static is not None else DEFAULT_MAX_LEN
        caps = {"max_utterances": max_learned_utterances or DEFAULT_MAX_UTTERANCES,
                "max_nodes": max_learned_nodes or DEFAULT_MAX_NODES}
        self.dynamic = DynamicTrie(n, max_len, self.begin_id, self.eot, **caps) if learn else None
        self._maps = [m for m in (static, self.dynamic) if m is not None]
        self._weights = [1.0 if m is static else learned_weight for m in self._maps]
        if static_recall_weight is None:  # a map saved by --learn-save holds the user's own utterances
            learned_file = static is not None and bool(static.header.flags & FLAG_LEARNED)
            static_recall_weight = recall_weight if learned_file else 1.0
        self._recall_weights = [static_recall_weight if m is static else recall_weight for m in self._maps]
        self.length_sigma = length_sigma
        self._speech_s: float | None = None
        self._recall_maps = list(self._maps)  # the prefix level's view of each map for this window
        self.backoff = backoff
        self.min_prob = min_prob
        self.min_cum = min_cum
        self.anchor_min = anchor_min
        self.gap_tail = gap_tail
        self.gap_backoff = gap_backoff
        self._gap_cache: dict = {}
        self.last_confidence: list[float] = []
        self.stats = {"rounds": 0, "drafted": 0, "accepted": 0, "learned": 0}
        self._cache_tokens: list[int] = []
        self._cache_state: _State = self._initial()
        self._last_len = 0

    # --- protocol -----------------------------------------------------------------------------
    def begin(self, window: WindowContext) -> None:
        from specwhisper.tokenmap.dynamic import LengthWeightedRecall

        self._reset_cache()
        self._speech_s = window.speech_s if window.speech_s and window.speech_s > 0 else None
        self._recall_maps = [LengthWeightedRecall(m, self._speech_s, self.length_sigma)
                             if m is self.dynamic and self._speech_s and self.length_sigma > 0 else m
                             for m in self._maps]

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        self.last_confidence = []
        self._last_len = 0
        if k <= 0 or not self._maps:
            return []
        state = self._state_for(tokens)
        draft: list[int] = []
        cum = 1.0
        while len(draft) < k:
            token, p = self._predict(state)
            if token is None or p < self.min_prob or cum * p < self.min_cum:
                break
            draft.append(token)
            self.last_confidence.append(p)
            cum *= p
            if token == self.eot:
                break
            state = self._extend(state, token)
        self._last_len = len(draft)
        return draft

    def observe(self, n_accepted: int) -> None:
        if self._last_len:
            self.stats["rounds"] += 1
            self.stats["drafted"] += self._last_len
            self.stats["accepted"] += min(n_accepted, self._last_len)
        self._last_len = 0

    def end(self, tokens: Sequence[int]) -> None:
        if self.dynamic is not None:
            before = self.dynamic.learned
            self.dynamic.add(tokens, self._speech_s)
            self.stats["learned"] += self.dynamic.learned - before
            self._gap_cache.clear()
        self._reset_cache()
        self._recall_maps = list(self._maps)  # the learned trie changed: a view's cached counts are stale

    # --- extras -------------------------------------------------------------------------------
    def knows_start(self, tokens: Sequence[int]) -> bool:
        """True when some utterance in the maps began with ``tokens[0]`` (after the prompt).

        A map that fits the speech knows how its utterances start even where the next words are
        open ("Please ..." begins 9 % of car commands, with dozens of continuations); a map that
        does not fit (read speech with a car map) has never seen the start at all.
        """
        if not tokens:
            return False
        for m in self._maps:
            if m.begin_node >= 0:
                node = m.child(m.begin_node, tokens[0])
                if node >= 0 and m.count(node) > 0:
                    return True
        return False

    def guess(self, tokens: Sequence[int]) -> int | None:
        """The single most likely next token (no confidence threshold), or None when no map knows anything."""
        if not self._maps:
            return None
        return self._predict(self._state_for(tokens, keep=False))[0]

    def end_probability(self, tokens: Sequence[int]) -> float | None:
        """How often the map's commands ended after ``tokens``' last words (``tokenmap.ending``):
        command mode ends an utterance early where this is high."""
        from specwhisper.tokenmap.ending import end_probability

        n = self.static.header.n if self.static is not None else self.dynamic.n
        return end_probability(self._maps, tokens, self.eot, n, self._is_punctuation)

    def _is_punctuation(self, token: int) -> bool:
        if self.tokenizer is None:
            return False
        text = self.tokenizer.decode([token]).strip()
        return bool(text) and all(not c.isalnum() for c in text)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the learned map atomically in the file format (merged into the static map if ``save_merged``)."""
        if self.dynamic is None:
            raise TokenMapError("nothing learned: the drafter was created without learn=True", where=str(path),
                                hint="add --learn")
        if self.tokenizer is not None:
            fingerprint, vocab = self.tokenizer.fingerprint(), self.tokenizer.vocab_size
        elif self.static is not None:
            fingerprint, vocab = self.static.header.fingerprint, self.static.header.vocab_size
        else:
            raise TokenMapError("cannot save a learned map without a tokenizer to fingerprint it", where=str(path))
        base = self.static if self.save_merged else None
        return self.dynamic.to_token_map(fingerprint, vocab, base=base).save(path)

    # --- internals ----------------------------------------------------------------------------
    def _reset_cache(self) -> None:
        self._cache_tokens = []
        self._cache_state = self._initial()

    def _initial(self) -> _State:
        prefix = tuple(m.begin_node for m in self._maps)
        anchor = tuple(p if p >= 0 and m.count(p) >= self.anchor_min else -1 for m, p in zip(self._maps, prefix))
        return _State(tuple({} for _ in self._maps), prefix, anchor, tuple(1 for _ in self._maps), 1, ())

    def _state_for(self, tokens: Sequence[int], keep: bool = True) -> _State:
        """Contexts of ``[BEGIN] + tokens``; extends the previous call's state when the history only grew."""
        cached = self._cache_tokens
        n = len(cached)
        if len(tokens) >= n and list(tokens[:n]) == cached:
            state = self._cache_state
            for t in tokens[n:]:
                state = self._extend(state, t)
        else:
            state = self._initial()
            for t in tokens:
                state = self._extend(state, t)
        if keep:
            self._cache_tokens = list(tokens)
            self._cache_state = state
        return state

    def _extend(self, state: _State, token: int) -> _State:
        ctxs, prefixes, anchors, anchor_lens = [], [], [], []
        length = state.length + 1
        for i, m in enumerate(self._maps):
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
        return _State(tuple(ctxs), tuple(prefixes), tuple(anchors), tuple(anchor_lens), length,
                      (state.tail + (token,))[-_TAIL:])

    def _gapped(self, state: _State) -> tuple[list[dict[int, int]], list[int]]:
        """Per map: followers and count of the longest recent tail found below the template anchor."""
        out_f: list[dict[int, int]] = []
        out_c: list[int] = []
        for i, m in enumerate(self._maps):
            anchor, prefix = state.anchor[i], state.prefix[i]
            after = state.length - state.anchor_len[i]
            found: tuple[dict[int, int], int] = ({}, 0)
            # anchored at BEGIN alone the gap would span every utterance: the n-grams already say that
            if anchor >= 0 and anchor != prefix and after > 0 and self.gap_tail > 0 and state.anchor_len[i] > 1:
                for q in range(min(self.gap_tail, after, len(state.tail)), 0, -1):
                    key = (i, anchor, state.tail[-q:])
                    hit = self._gap_cache.get(key)
                    if hit is None:
                        if len(self._gap_cache) > 4096:
                            self._gap_cache.clear()
                        hit = self._gap_cache[key] = m.below(anchor, state.tail[-q:])
                    if hit[1] > 0:
                        found = hit
                        break
            out_f.append(found[0])
            out_c.append(found[1])
        return out_f, out_c

    def _predict(self, state: _State) -> tuple[int | None, float]:
        """The most likely next token and its blended probability."""
        maps, weights = self._maps, self._weights
        gap_f, gap_c = self._gapped(state)
        candidates: set[int] = set()
        for i, (m, recall) in enumerate(zip(maps, self._recall_maps)):
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
        prefix_levels = [[(m, w, p)] for m, w, p in zip(self._recall_maps, self._recall_weights, state.prefix)]
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
