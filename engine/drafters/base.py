"""The one small protocol every drafter implements (token map, prompt lookup, draft model,
previous pass), and the one a drafter of your own implements: ``WhisperEngine(drafters=[...])``.

A drafter sees token ids only, never decoder state: ``begin`` a window, ``propose`` up to ``k``
tokens that might follow, ``observe`` how many of them the verifier accepted, ``end`` with the
window's tokens. Being wrong costs speed, never text: the verifier checks every proposed token
against the main model, ids outside the vocabulary end a proposal, and a drafter that raises is
dropped for the rest of the transcription with a warning (``chain``). ``propose`` may be called
without an ``observe`` after it (the first-token gate and the shadow replay only look).

Optional attributes the engine reads where a drafter has them: ``learns`` (True: it also sees the
``begin``/``end`` of windows decoded without drafts, e.g. with speculation off, to learn from
them; measure such a drafter on a fresh instance, or it has learned the clip already), ``costly``
(a model of its own: never replayed in the shadow of a single-row window), ``last_confidence``
(per-token confidence of its last proposal), ``knows_start(tokens)`` (it has seen utterances begin
so), ``last_source`` (which part of it proposed, for the statistics), ``prepare(audio)`` and
``drafting`` (a draft model running its encoder beside the main one), ``confident_reach`` with
``keep(n)`` (it stops itself where unsure and gives ``last_confidence``, a probability per token:
it is asked past K, verified as far as its confidence, valued at the acceptance measured for
drafts it rated alike, pays for, and told how much of its proposal that was, ``draft_reach``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import OptionError


@dataclass(frozen=True)
class WindowContext:
    """What a drafter may know about the window being decoded.

    ``prompt`` is the decoder prompt (SOT sequence, with previous text first when conditioning);
    ``previous_tokens`` are the text tokens of earlier windows of the same audio;
    ``initial_prompt_tokens`` come from the user's prompt or hotwords; ``audio`` is the
    16 kHz mono waveform of this window (for draft models, which run their own encoder);
    ``max_new_tokens`` bounds what can still be emitted; ``speech_s`` is how long the speech in the
    window lasts (:func:`specwhisper.audio.speech_seconds`), None where unknown.
    """

    prompt: tuple[int, ...]
    eot: int
    max_new_tokens: int
    previous_tokens: tuple[int, ...] = ()
    initial_prompt_tokens: tuple[int, ...] = ()
    audio: Any = None
    window_index: int = 0
    speech_s: float | None = None
    extra: dict = field(default_factory=dict)


@runtime_checkable
class Drafter(Protocol):
    """Proposes continuations; see module docstring."""

    name: str

    def begin(self, window: WindowContext) -> None:
        """Start a new window (reset per-window state)."""

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` token ids that may follow ``tokens`` (the ids emitted so far in this window,
        prompt excluded). May return fewer, or none."""

    def observe(self, n_accepted: int) -> None:
        """How many tokens of the last proposal the verifier accepted."""

    def end(self, tokens: Sequence[int]) -> None:
        """The window's final emitted tokens (EOT excluded): drafters that learn online use them."""


_MEMBERS = ("name", "begin", "propose", "observe", "end")


def check_drafters(drafters) -> list:
    """``drafters`` as a list, or an ``OptionError`` naming what is wrong: a drafter that is not a
    list's element (one drafter, a string) or lacks a member of the protocol failed only when a
    window was decoded, with an ``AttributeError`` or a ``TypeError``."""
    if drafters is None:
        return []
    if isinstance(drafters, (str, bytes)) or not hasattr(drafters, "__iter__") or isinstance(drafters, Drafter):
        raise OptionError(f"drafters must be a list of drafters, got {type(drafters).__name__}", where="drafters",
                          hint="pass drafters=[MyDrafter()] (see specwhisper.Drafter for the methods a drafter has)")
    drafters = list(drafters)
    for i, drafter in enumerate(drafters):
        missing = [m for m in _MEMBERS if not hasattr(drafter, m)]
        if missing:
            raise OptionError(f"drafters[{i}] ({type(drafter).__name__}) has no {', '.join(missing)}",
                              where="drafters", hint="a drafter has a name and begin, propose, observe and end "
                                                     "methods (see specwhisper.Drafter)")
    return drafters


class NullDrafter:
    """Proposes nothing: the engine then runs plain greedy through the same loop."""

    name = "none"

    def begin(self, window: WindowContext) -> None:
        pass

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        return []

    def observe(self, n_accepted: int) -> None:
        pass

    def end(self, tokens: Sequence[int]) -> None:
        pass
