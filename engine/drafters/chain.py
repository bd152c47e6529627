"""Several drafters behind one: the first that proposes something drafts this round.

A drafter that raises (a bug of one of your own, or of ours) is dropped for the rest of the
transcription with a warning: a drafter's bug costs speed, never text, nor the transcription.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import warn_caller
from .base import Drafter, WindowContext


class DrafterChain:
    """Asks drafters in priority order; feedback goes to the one whose proposal was verified.
    ``learners``: drafters that only see each window begin and end, never asked to draft (a call
    without speculation still teaches a learning token map what was said)."""

    name = "chain"

    def __init__(self, drafters: Sequence[Drafter], learners: Sequence[Drafter] = ()) -> None:
        self.drafters = list(drafters)
        self.learners = [d for d in learners if d not in self.drafters]
        self._last: Drafter | None = None

    @property
    def last_source(self) -> str:
        return self._last.name if self._last is not None else "none"

    @property
    def last_confidence(self) -> list[float] | None:
        """Per-token confidence of the last proposal, where its drafter gives one."""
        return getattr(self._last, "last_confidence", None) if self._last is not None else None

    def knows_start(self, tokens: Sequence[int]) -> bool:
        """True when a drafter has seen utterances begin like ``tokens`` (see TokenMapDrafter)."""
        return any(getattr(d, "knows_start", None) is not None and d.knows_start(tokens) for d in self.drafters)

    def begin(self, window: WindowContext) -> None:
        for d in (*self.drafters, *self.learners):
            self._call(d, "begin", window)

    def propose(self, tokens: Sequence[int], k: int, reach: int | None = None) -> list[int]:
        """The first proposal of up to ``k`` tokens; ``reach``: how far a drafter with
        ``confident_reach`` (one that stops itself where unsure) is asked instead."""
        for d in tuple(self.drafters):  # a copy: a drafter that raises leaves the list
            n = reach if reach is not None and getattr(d, "confident_reach", False) else k
            try:
                proposal = d.propose(tokens, n)
                # any sequence of ids (a numpy array's truth value is an error); the verifier ends
                # a proposal at an id outside the vocabulary
                proposal = [int(t) for t in proposal] if proposal is not None else []
            except Exception as exc:  # noqa: BLE001  (see the module docstring)
                self._drop(d, "propose", exc)
                continue
            if proposal:
                self._last = d
                return proposal[:n]
        self._last = None
        return []

    def keep(self, n: int) -> None:
        """Only the first ``n`` tokens of the last proposal are verified (``draft_reach``)."""
        if getattr(self._last, "keep", None) is not None:
            self._call(self._last, "keep", n)

    def observe(self, n_accepted: int) -> None:
        if self._last is not None:
            self._call(self._last, "observe", n_accepted)

    def end(self, tokens: Sequence[int]) -> None:
        for d in (*self.drafters, *self.learners):
            self._call(d, "end", tokens)

    def begin_learning(self, window: WindowContext) -> None:
        """A window decoded without drafting (beam search, windows decoded together): only the
        drafters that learn see it begin (a draft model's run-ahead must not start)."""
        for d in self._learning():
            self._call(d, "begin", window)

    def end_learning(self, tokens: Sequence[int]) -> None:
        """That window's text to the drafters that learn (``begin_learning``)."""
        for d in self._learning():
            self._call(d, "end", tokens)

    def _call(self, drafter: Drafter, method: str, arg) -> None:
        try:
            getattr(drafter, method)(arg)
        except Exception as exc:  # noqa: BLE001  (see the module docstring)
            self._drop(drafter, method, exc)

    def _drop(self, drafter: Drafter, method: str, exc: Exception) -> None:
        """Leave ``drafter`` out of this transcription's drafting and learning, said once."""
        self.drafters = [d for d in self.drafters if d is not drafter]
        self.learners = [d for d in self.learners if d is not drafter]
        if self._last is drafter:
            self._last = None
        name = getattr(drafter, "name", type(drafter).__name__)
        warn_caller(f"drafter {name!r} raised {type(exc).__name__} in {method}(): {exc}; drafting on without it for "
                    "the rest of this transcription (the text is what it would have been)")

    def _learning(self) -> list[Drafter]:
        return [d for d in (*self.drafters, *self.learners) if getattr(d, "learns", False)]

    def __bool__(self) -> bool:  # whether anything drafts: learners do not
        return bool(self.drafters)
