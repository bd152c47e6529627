"""Drafts from the previous pass of a live stream: what the last decoding of the same audio said next.

A live stream (``specwhisper.live``) decodes its audio buffer again every step, with one step of
audio more. Most of each pass repeats the pass before: the words not yet committed, and
segment timestamps that move by a frame or two at most. That earlier hypothesis is the best
draft there is, and it costs nothing. The engine receives it as ``TranscribeOptions.draft_hint``
(the tokens the previous pass emitted after this pass's prompt and forced prefix) and puts this
drafter first in the chain for that call; it proposes nothing once the hint runs out, so the
token map and prompt lookup draft the new words.

Alignment: the current pass may insert or drop a token where it disagrees with the previous
one, so a fixed position would lose the thread after the first difference. Each round checks
that the last emitted token is the hint's token where the previous round left off, else finds
the last ``n`` emitted tokens (``n`` = ``max_ngram`` down to 2) in the hint, nearest to that
place, and proposes what followed. Timestamps match any timestamp
(a segment end moves from 2.40 to 2.42 s as audio arrives), and proposed timestamps are shifted
by the difference last seen between this pass and the hint, so ``<|2.42|>`` is followed by the
next segment's ``<|2.42|>``, not the hint's ``<|2.40|>``. ``align="position"`` (token ``i`` of
this pass drafted by token ``i`` of the hint) is kept for comparison (``benchmarks/studies/live_stream.py``).

Like every drafter it changes speed only: the verifier checks every proposed token.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import WindowContext

LAST_TIMESTAMP = 1500  # <|30.00|>: the largest timestamp offset a window has


class PreviousPassDrafter:
    """Proposes the continuation of ``hint`` after the emitted tokens (see module docstring)."""

    name = "previous_pass"
    align = "suffix"  # or "position"

    def __init__(self, hint: Sequence[int], timestamp_begin: int, max_ngram: int = 4) -> None:
        self.hint = [int(t) for t in hint]
        self.tb = timestamp_begin
        self.max_ngram = max_ngram
        self._hint = list(self.hint)
        self._expect = 0  # hint index expected to follow the tokens emitted so far
        self._seen = 0  # how many tokens had been emitted when ``_expect`` was set
        self._shift = 0  # this pass's timestamps minus the hint's, last seen

    def begin(self, window: WindowContext) -> None:
        # A pass over the same buffer usually ends where the previous one did: draft its EOT too.
        self._hint = self.hint + [window.eot]
        self._expect = self._seen = self._shift = 0

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        if k <= 0 or not tokens:
            return []
        expect = self._expect + len(tokens) - self._seen
        self._seen = len(tokens)
        j = expect if self.align == "position" else self._locate(tokens, expect)
        if j is None or not 0 < j < len(self._hint):
            self._expect = expect
            return []
        self._expect = j
        tb, last, matched = self.tb, tokens[-1], self._hint[j - 1]
        if last >= tb and matched >= tb:
            self._shift = last - matched
        out = self._hint[j:j + k]
        if self._shift:
            out = [min(max(t + self._shift, tb), tb + LAST_TIMESTAMP) if t >= tb else t for t in out]
        return out

    def observe(self, n_accepted: int) -> None:
        pass

    def end(self, tokens: Sequence[int]) -> None:
        pass

    def _same(self, a: int, b: int) -> bool:
        return a == b or (a >= self.tb and b >= self.tb)

    def _matches(self, tokens: Sequence[int], j: int, n: int) -> bool:
        """Whether the ``n`` hint tokens before index ``j`` are the last ``n`` emitted ones."""
        hint, same = self._hint, self._same
        return all(same(hint[j - n + m], tokens[len(tokens) - n + m]) for m in range(n))

    def _locate(self, tokens: Sequence[int], expect: int) -> int | None:
        """The hint index after the longest suffix match of ``tokens``, nearest to ``expect``.

        In step with the hint, the last token is enough; to find the thread again elsewhere two
        tokens must match, no further back than ``max_ngram`` (a pass that inserted a word). Where
        nothing matches the drafter is silent, so that the next drafter in the chain speaks: past
        the hint's end a pass decodes new speech, and prompt lookup drafts a repeating decoder
        far better than a stale hint."""
        size = len(self._hint)
        if 1 <= expect < size and self._matches(tokens, expect, 1):
            return expect  # still in step with the hint: the common case, checked first
        for n in range(min(self.max_ngram, len(tokens)), 1, -1):
            found = [j for j in range(max(n, expect - self.max_ngram), size) if self._matches(tokens, j, n)]
            if found:
                return min(found, key=lambda j: abs(j - expect))
        return None
