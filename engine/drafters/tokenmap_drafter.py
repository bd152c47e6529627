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

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import TokenMapError, warn_caller
from ..io_utils import exclusive_lock, file_stamp
from .base import WindowContext
from .tokenmap_contexts import BlendedContexts


class TokenMapDrafter:
    """Implements the drafter protocol over a static :class:`TokenMap` and/or a learned dynamic map."""

    name = "tokenmap"
    # It stops where unsure and gives each token's confidence: asked past the policy's K, its draft is
    # kept as far as that confidence pays for the wider call (``draft_reach``).
    confident_reach = True

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
        # the static map's file as loaded: a save into it that finds it written since (another
        # process saved its learning there) merges into what is there now (``save``)
        self._static_file = _loaded_file(static)
        self.tokenizer = tokenizer
        self.eot, self.begin_id = int(eot), int(begin)
        self.learn = learn
        self.learning = learn  # paused by ``learning_paused``
        self.save_merged = save_merged
        n = static.header.n if static is not None else DEFAULT_N
        max_len = static.header.max_len if static is not None else DEFAULT_MAX_LEN
        caps = {"max_utterances": max_learned_utterances or DEFAULT_MAX_UTTERANCES,
                "max_nodes": max_learned_nodes or DEFAULT_MAX_NODES}
        self.dynamic = DynamicTrie(n, max_len, self.begin_id, self.eot, **caps) if learn else None
        self._maps = [m for m in (static, self.dynamic) if m is not None]
        weights = [1.0 if m is static else learned_weight for m in self._maps]
        if static_recall_weight is None:  # a map saved by --learn-save holds the user's own utterances
            learned_file = static is not None and bool(static.header.flags & FLAG_LEARNED)
            static_recall_weight = recall_weight if learned_file else 1.0
        recall_weights = [static_recall_weight if m is static else recall_weight for m in self._maps]
        self.contexts = BlendedContexts(self._maps, weights, recall_weights, backoff=backoff, anchor_min=anchor_min,
                                        gap_tail=gap_tail, gap_backoff=gap_backoff)
        self.length_sigma = length_sigma
        self._speech_s: float | None = None
        self.min_prob = min_prob
        self.min_cum = min_cum
        self.last_confidence: list[float] = []
        self.stats = {"rounds": 0, "drafted": 0, "accepted": 0, "learned": 0}
        self._last_len = 0

    # --- protocol -----------------------------------------------------------------------------
    def begin(self, window: WindowContext) -> None:
        from specwhisper.tokenmap.dynamic import LengthWeightedRecall

        self.contexts.reset()
        self._speech_s = window.speech_s if window.speech_s and window.speech_s > 0 else None
        self.contexts.recall_maps = [LengthWeightedRecall(m, self._speech_s, self.length_sigma)
                             if m is self.dynamic and self._speech_s and self.length_sigma > 0 else m
                             for m in self._maps]

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        self.last_confidence = []
        self._last_len = 0
        if k <= 0 or not self._maps:
            return []
        contexts = self.contexts
        state = contexts.state_for(tokens)
        draft: list[int] = []
        cum = 1.0
        while len(draft) < k:
            token, p = contexts.predict(state)
            if token is None or p < self.min_prob or cum * p < self.min_cum:
                break
            draft.append(token)
            self.last_confidence.append(p)
            cum *= p
            if token == self.eot:
                break
            state = contexts.extend(state, token)
        self._last_len = len(draft)
        return draft

    def keep(self, n: int) -> None:
        """Only the first ``n`` tokens of the last proposal go to the verifier."""
        self._last_len = min(self._last_len, n)
        del self.last_confidence[n:]

    def observe(self, n_accepted: int) -> None:
        if self._last_len:
            self.stats["rounds"] += 1
            self.stats["drafted"] += self._last_len
            self.stats["accepted"] += min(n_accepted, self._last_len)
        self._last_len = 0

    def end(self, tokens: Sequence[int]) -> None:
        if self.learns:
            before = self.dynamic.learned
            self.dynamic.add(tokens, self._speech_s)
            self.stats["learned"] += self.dynamic.learned - before
        self.contexts.end_window(learned=self.dynamic is not None)  # a view's cached counts are stale

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
        return self.contexts.predict(self.contexts.state_for(tokens, keep=False))[0]

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
        if self._static_file is None or self._static_file[0] != Path(path).resolve():  # nothing to merge with
            return self.dynamic.to_token_map(fingerprint, vocab, base=base).save(path)
        target = self._static_file[0]  # the file itself: a save through a symlink must not replace the link
        with exclusive_lock(target.parent / f".{target.name}.lock"):  # processes saving into one map keep each one's learning
            learned = self.dynamic.to_token_map(fingerprint, vocab, base=self._merge_base(target, base))
            saved = learned.save(target)
            self._static_file = (target, file_stamp(saved))  # this save is not another's
            return saved

    @property
    def learns(self) -> bool:
        """Whether each window's text is learned now (``learn=True`` and not paused)."""
        return self.dynamic is not None and self.learning

    @contextlib.contextmanager
    def learning_paused(self) -> Iterator[None]:
        """Decode without learning (a benchmark's warm-up: the map must not learn its clip)."""
        before, self.learning = self.learning, False
        try:
            yield
        finally:
            self.learning = before

    def _merge_base(self, target: Path, base):
        """The map the learned utterances are merged into: ``base`` (the static map as loaded), or, where the
        target is the static map's own file and another process wrote it since it was loaded, that
        file as it is now (it holds the static map and the other's learning). Not handled: a run
        that saves, then saves again after another's save, counts its first part twice (counts
        grow; nothing is lost)."""
        if base is None or file_stamp(target) in (None, self._static_file[1]):
            return base
        from specwhisper.tokenmap import load_token_map

        try:
            return load_token_map(target, self.tokenizer)
        except TokenMapError as exc:  # not a map for this model any more: ours replaces it, said
            warn_caller(f"{target} changed since it was loaded and cannot be merged into ({exc.what}): "
                        "writing the map as loaded with what this run learned")
            return base


def _loaded_file(static) -> tuple[Path, tuple[int, int, int] | None] | None:
    """The file a static map was loaded from and its stamp now (None for a map made in memory)."""
    source = getattr(static, "source", None)
    if not source or source == "<memory>" or not Path(source).is_file():
        return None
    return Path(source).resolve(), file_stamp(source)
