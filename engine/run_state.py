"""The state of one ``transcribe`` call as its windows go by: what the window loop, the window's
decoding and the window's segments read and carry to the next window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .drafters.bigram import BigramGuesser
from .drafters.chain import DrafterChain
from .policy import AdaptiveDraftLength, FixedDraftLength
from .results import WindowResult
from .stats import DecodeStats
from .transcribe_options import TranscribeOptions


@dataclass
class RunState:
    """The state of one ``transcribe`` call as its windows go by."""

    opts: TranscribeOptions
    ctx_frames: int
    chain: DrafterChain
    policy: AdaptiveDraftLength | FixedDraftLength
    language: str | None
    initial: list[int]
    guesser: BigramGuesser
    language_source: str = "given"  # see ``Result.language_source``
    retry_ladder: tuple[float, ...] = ()  # a short window's ladder, kept for its decoding in full (``transcribe``)
    timestamps: bool = False
    language_prob: float = 1.0
    language_probs: list[tuple[str, float]] | None = None
    first_encoded: tuple | None = None  # (start, end frame, encoder output, seconds): language detection's
    previous: list[int] = field(default_factory=list)
    reset_since: int = 0  # where the prompt's previous text starts in initial + previous
    last_speech: float = 0.0  # the end of the last word timed (seconds)
    n_content: int = 0  # frames of the recording
    dropped: bool = False  # the window just decoded was dropped as a hallucination over silence
    tail: list[int] = field(default_factory=list)  # the last window's incomplete segment (drafting only)
    aligned_end: bool = False  # the last window's last segment was ended at its last word (``early_end``)
    cpu_free: Callable[[], bool] | None = None  # whether nothing runs beside the decoder now (encoder ahead, draft model)
    lockstep: dict | None = None  # windows decoded in lockstep: slots, step-graph calls, rows fed
    tokens: list[int] = field(default_factory=list)
    windows: list[WindowResult] = field(default_factory=list)
    stats: DecodeStats = field(default_factory=DecodeStats)
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("load_s", "audio_s", "features_s", "encoder_s", "encoder_hidden_s", "language_s", "prefill_s", "decoder_s"),
        0.0))
