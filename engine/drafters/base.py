"""The one small protocol every drafter implements (token map, prompt lookup, draft model).

A drafter sees token ids only, never decoder state: ``begin`` a window, ``propose`` up to ``k``
tokens that might follow, ``observe`` how many of them the verifier accepted. Being wrong costs
speed, never text: the verifier checks every proposed token against the main model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


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
