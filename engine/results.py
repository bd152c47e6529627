"""What a transcription returns: segments, decoded windows and the result with its timings.

Plain data, apart from the engine: writers, the faster-whisper facade and the batch pipeline read
it without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .features import N_FRAMES


def _short(text: str, limit: int = 60) -> str:
    """``text`` quoted, cut to ``limit`` characters: a repr is read at a prompt, not parsed."""
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


@dataclass
class Segment:
    """A stretch of speech and its text: a timestamped segment, or a whole window without timestamps.
    ``tokens``: its tokens, timestamps included; ``words``: with ``word_timestamps``."""

    start_s: float
    end_s: float
    text: str
    tokens: list[int] = field(default_factory=list, repr=False)
    words: list | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        """The segment in JSON; ``words`` (faster-whisper's fields) only where word timings were
        asked for, so output without them stays as it was."""
        data = {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3), "text": self.text}
        if self.words is not None:
            data["words"] = [{"start": round(w.start, 3), "end": round(w.end, 3), "word": w.word,
                              "probability": round(w.probability, 4)} for w in self.words]
        return data


@dataclass
class WindowResult:
    """One decoded window. ``tokens``: everything it emitted but EOT (timestamps and an incomplete
    last segment included: what exactness is checked on); ``text``: its kept segments' text."""

    start_s: float
    end_s: float
    text: str
    tokens: list[int]
    numerics: str
    numerics_reason: str
    stats: dict
    segments: list[Segment] = field(default_factory=list)
    temperature: float = 0.0  # the temperature of the attempt kept (see ``fallback``)
    avg_logprob: float | None = None  # with ``scores`` or thresholds that need them
    no_speech_prob: float | None = None
    compression_ratio: float = 0.0
    seek: int = 0  # the 10 ms frame the window started at

    def __repr__(self) -> str:
        # the dataclass's own repr prints every token and statistic: 3-23 KB at a notebook's prompt
        return (f"WindowResult({self.start_s:.2f}-{self.end_s:.2f} s, text={_short(self.text)}, "
                f"tokens={len(self.tokens)}, segments={len(self.segments)}, numerics={self.numerics!r})")


@dataclass
class Result:
    """What one transcription produced, with where the time went and how drafting did."""

    text: str
    tokens: list[int]
    language: str
    language_probability: float
    numerics: str
    duration_s: float
    timings: dict[str, float]
    stats: dict
    windows: list[WindowResult] = field(default_factory=list)
    model: str = ""
    device: str = "cpu"
    compute_type: str = ""
    threads: int = 0
    decoder_threads: int = 0
    row_floor: int | None = None
    row_ceiling: int | None = None
    batch_decoder: str = "ct2"
    contract: str = ""
    encoder: str = "ct2"
    speculation_available: bool = True
    audio_ctx: int = N_FRAMES
    audio_ctx_fallback: str | None = None
    temperature: float | tuple[float, ...] = 0.0
    seed: int = 0
    timestamps: bool = False
    # where ``language`` came from: "given", "token map" (the map's transcripts' language, where
    # none was given), "detected", or "english-only model"
    language_source: str = ""
    task: str = "transcribe"  # as decoded: "translate" is English text of other speech

    @property
    def segments(self) -> list[Segment]:
        return [s for w in self.windows for s in w.segments]

    def __repr__(self) -> str:
        # what a notebook user reads first; everything else is in the fields and ``to_dict()``
        total = self.timings.get("total_s")
        took = f", total_s={total:.2f}" if total is not None else ""
        return (f"Result(text={_short(self.text)}, language={self.language!r}, duration_s={self.duration_s:.2f}, "
                f"windows={len(self.windows)}, segments={len(self.segments)}, numerics={self.numerics!r}, "
                f"encoder={self.encoder!r}{took})")

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "language": self.language,
            "language_probability": round(self.language_probability, 4),
            "language_source": self.language_source,
            "task": self.task,
            "numerics": self.numerics,
            "duration_s": round(self.duration_s, 3),
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            "stats": self.stats,
            "segments": [s.to_dict() for s in self.segments],
            "windows": [
                {"start_s": w.start_s, "end_s": w.end_s, "text": w.text, "tokens": w.tokens, "numerics": w.numerics,
                 "numerics_reason": w.numerics_reason, "stats": w.stats, "temperature": w.temperature}
                for w in self.windows
            ],
            "model": self.model,
            "device": self.device,
            "compute_type": self.compute_type,
            "threads": self.threads,
            "decoder_threads": self.decoder_threads,
            "row_floor": self.row_floor,
            "row_ceiling": self.row_ceiling,
            "batch_decoder": self.batch_decoder,
            "contract": self.contract,
            "encoder": self.encoder,
            "speculation_available": self.speculation_available,
            "audio_ctx": self.audio_ctx,
            "audio_ctx_fallback": self.audio_ctx_fallback,
            "temperature": self.temperature,
            "seed": self.seed,
            "timestamps": self.timestamps,
        }
