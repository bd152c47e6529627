"""Per-call transcription options (``TranscribeOptions``): every option checked once, when made.

Why a module of its own: the CLI, the faster-whisper facade, live streams and command mode build
and check options without the engine; the hot loop then trusts them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from numbers import Integral, Real

from .audio_ctx import parse_audio_ctx
from .decoding_options import check_decoding_options
from .errors import OptionError, UnknownOptionError, option_where
from .fallback import COMPRESSION_RATIO_THRESHOLD, LADDER, Thresholds, parse_temperatures
from .features import FRAMES_PER_SECOND, N_FRAMES

NUMERICS_CHOICES = ("auto", "batch-invariant", "single-row")
TIMESTAMPS_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class TranscribeOptions:
    """Per-call options, validated once here so the hot loop can trust them."""

    language: str | None = None
    task: str = "transcribe"
    numerics: str = "auto"
    # ``numerics`` is what ``auto`` settled for a whole batch job (``batch.decisions``): pinned, so
    # that every worker decodes alike, but drafting still decided as under ``auto`` (speed only).
    numerics_from_auto: bool = False
    speculation: bool = True
    draft_len: int | None = None
    condition_on_previous_text: bool = False
    initial_prompt: str | tuple[int, ...] | None = None  # text, or token ids
    audio_ctx: str | int = "full"
    # A tuple: a fallback ladder (see ``fallback``). By default greedy, and a window whose text loops
    # is decoded again at the next temperature, as in Whisper and faster-whisper (a loop is a
    # failure greedy repeats every time; windows that do not loop are untouched).
    temperature: float | tuple[float, ...] = LADDER
    compression_ratio_threshold: float | None = COMPRESSION_RATIO_THRESHOLD
    seed: int = 0
    timestamps: str = "auto"
    progress: Callable[[int, int], None] | None = None  # (10 ms frames done, frames in all)
    # Independent windows (no previous text, no timestamps) decoded together, one row each per
    # decoder call, on the invariant decoder (``invariant_batch``); drafts nothing; 1: one at a time.
    batch_size: int = 1
    # faster-whisper's options (same names, meaning and defaults where ours differ not: see
    # ``whisper_model`` for the facade that sets its defaults)
    log_prob_threshold: float | None = None
    no_speech_threshold: float | None = None
    scores: bool = False  # avg_logprob and no_speech_prob for every window even without thresholds
    best_of: int = 1  # samples per temperature > 0, the most probable kept
    beam_size: int = 1  # > 1: CTranslate2's beam search, speculation off for the window
    patience: float = 1.0
    length_penalty: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    prompt_reset_on_temperature: float = 0.5
    prefix: str | tuple[int, ...] | None = None  # text, or token ids forced as given (timestamps included)
    # Tokens an earlier decoding of (mostly) the same audio emitted after this call's prompt and
    # prefix (a live stream's previous pass): drafted first, ahead of the engine's drafters. Speed only.
    draft_hint: tuple[int, ...] = ()
    hotwords: str | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)  # -1: the model's non-speech symbols
    max_initial_timestamp: float = 1.0
    max_new_tokens: int | None = None
    clip_timestamps: str | tuple[float, ...] = "0"
    # faster-whisper's window length in seconds (None: 30): each window decodes at most this much
    # audio, its features zero-padded to the encoder's 30 s input (see ``window_frames``)
    chunk_length: int | None = None
    multilingual: bool = False  # detect the language of every window
    word_timestamps: bool = False
    prepend_punctuations: str = "\"'“¿([{-"
    append_punctuations: str = "\"'.。,，!！?？:：”)]}、"
    hallucination_silence_threshold: float | None = None
    # Up to 3 windows while none is sure (faster-whisper's default is 1, which its facade keeps):
    # 35 s of faint noise before jfk was detected as Nynorsk (0.33) from the noise alone and jfk
    # was lost, by faster-whisper too; the next window says English (0.9+). A first window over
    # the threshold decides alone, as before, and costs nothing more.
    language_detection_segments: int = 3
    language_detection_threshold: float | None = 0.5  # None: the first window decides

    def __post_init__(self) -> None:
        if self.task not in ("transcribe", "translate"):
            raise OptionError(f"unknown task {self.task!r}", where=option_where("task"), hint="use transcribe or translate")
        if self.numerics not in NUMERICS_CHOICES:
            raise OptionError(f"unknown numerics {self.numerics!r}", where=option_where("numerics"),
                              hint=f"use one of {', '.join(NUMERICS_CHOICES)}")
        object.__setattr__(self, "audio_ctx", parse_audio_ctx(self.audio_ctx))
        if isinstance(self.timestamps, bool):
            object.__setattr__(self, "timestamps", "on" if self.timestamps else "off")
        if self.timestamps not in TIMESTAMPS_CHOICES:
            raise OptionError(f"unknown timestamps setting {self.timestamps!r}", where=option_where("timestamps"),
                              hint="use auto (on for audio longer than 30 s), on or off")
        object.__setattr__(self, "temperature", parse_temperatures(self.temperature))
        ratio = self.compression_ratio_threshold
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, Real) or not ratio > 0):
            raise OptionError(f"compression ratio threshold {ratio!r} must be a positive number (or None: "
                              "no such test)", where="compression_ratio_threshold",
                              hint="use e.g. 2.4 (the default)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise OptionError(f"seed {self.seed!r} is not a non-negative integer", where=option_where("seed"),
                              hint="use a whole number such as 0")
        if self.draft_len is not None:
            if isinstance(self.draft_len, bool) or not isinstance(self.draft_len, Integral) or not 0 <= self.draft_len <= 16:
                raise OptionError(f"draft length {self.draft_len!r} is not a whole number from 0 to 16",
                                  where=option_where("draft_len"), hint="use 0..16 (0 disables drafting)")
            object.__setattr__(self, "draft_len", int(self.draft_len))
        for name in SWITCHES:
            object.__setattr__(self, name, switch(getattr(self, name), name))
        check_decoding_options(self)
        if self.window_frames < N_FRAMES and self.audio_ctx != "full":
            raise OptionError(f"chunk_length={self.chunk_length} and audio_ctx={self.audio_ctx!r} both set the "
                              "window: chunk_length windows feed the full 30 s encoder input",
                              where="chunk_length/audio_ctx", hint="use one of them (audio_ctx='full' with chunk_length)")

    @property
    def window_frames(self) -> int:
        """Mel frames of audio one window decodes (faster-whisper's ``nb_max_frames``). The encoder
        input stays ``N_FRAMES``: a shorter window's features are zero-padded to it, as
        faster-whisper's ``pad_or_trim`` pads them, so only the windows' boundaries change."""
        return N_FRAMES if self.chunk_length is None else self.chunk_length * FRAMES_PER_SECOND

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(self.compression_ratio_threshold, self.log_prob_threshold, self.no_speech_threshold)

    def generate_only(self, temperature: float = 0.0) -> str | None:
        """Why an attempt at ``temperature`` must run CTranslate2's ``generate`` (an algorithm
        other than greedy or sampling, which the verifier does not run), or None. Beam search is
        for greedy attempts only: faster-whisper samples fallback attempts with beam 1."""
        if self.beam_size > 1 and temperature == 0:
            return f"beam search (beam_size={self.beam_size})"
        if self.repetition_penalty != 1.0 or self.no_repeat_ngram_size:
            return "repetition penalty or no_repeat_ngram_size"
        return None


# The on/off options: a string such as "false" (from a config file) would read as on.
SWITCHES = ("speculation", "condition_on_previous_text", "scores", "suppress_blank", "multilingual",
            "word_timestamps", "numerics_from_auto")


def switch(value, name: str) -> bool:
    """An on/off option as a bool: True, False, or 1 / 0 (numpy's too); anything else, a string
    above all ("false" is truthy), is an ``OptionError`` naming the option."""
    if isinstance(value, Integral) and value in (0, 1):
        return bool(value)
    if getattr(getattr(value, "dtype", None), "kind", "") == "b" and getattr(value, "shape", None) == ():
        return bool(value)  # a numpy bool
    raise OptionError(f"{name} must be True or False, got {value!r}", where=option_where(name),
                      hint="pass a bool (a string such as 'false' would read as on)")


def checked_options(call: str, not_here: tuple[str, ...] = (), **options) -> TranscribeOptions:
    """``TranscribeOptions`` from the keyword arguments of ``call`` (e.g. ``WhisperEngine.transcribe``),
    an unknown name refused with the names there are (not Python's error about a dataclass);
    ``not_here``: options ``call`` sets itself, left out of that list."""
    known = {f.name for f in fields(TranscribeOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        listed = known - {"progress", "numerics_from_auto", *not_here}
        raise UnknownOptionError.naming(unknown, call, hint=f"options are: {', '.join(sorted(listed))}")
    return TranscribeOptions(**options)


# CTranslate2's compute types (what a machine supports among them is checked as the model loads)
COMPUTE_TYPES = ("default", "auto", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16", "float32", "float")


def check_engine_options(*, device, compute_type, threads, decoder_threads, encoder, batch_decoder,
                         switches: dict | None = None) -> None:
    """``WhisperEngine``'s own options (and ``LoadedModel``'s, the same check), checked before
    anything loads (a typo costs no load time, and a wrong type is an ``OptionError`` naming the
    option, not a failure deep in a load). ``switches``: on/off options by name."""
    from .backend import BATCH_DECODERS
    from .encoders import ENCODERS

    if device not in ("cpu", "cuda"):
        raise OptionError(f"unknown device {device!r}", where=option_where("device"), hint="use cpu or cuda")
    if compute_type not in COMPUTE_TYPES:
        raise OptionError(f"unknown compute type {compute_type!r}", where=option_where("compute_type"),
                          hint=f"use one of {', '.join(COMPUTE_TYPES)} (int8 is the default on CPU)")
    for name, value, hint in (("threads", threads, "use e.g. 2 (the cores to use)"),
                              ("decoder_threads", decoder_threads,
                               "use a positive number, or leave it out to let the engine measure")):
        if (value is not None or name == "threads") and (isinstance(value, bool) or not isinstance(value, Integral)
                                                         or value < 1):
            raise OptionError(f"{name.replace('_', ' ')} must be a whole number >= 1, got {value!r}",
                              where=option_where(name), hint=hint)
        from .cores import max_threads

        most = max_threads()
        if value is not None and value > most:  # 64 on 2 cores stalled for minutes, 100,000 crashed in CTranslate2
            raise OptionError(f"{name}={value} is more than this machine can use: at most {most} "
                              f"(twice its {most // 2} cores)", where=option_where(name),
                              hint="use the cores the process may use (the default; specwhisper doctor says how many)")
    for name, value, choices in (("encoder", encoder, ENCODERS), ("batch_decoder", batch_decoder, BATCH_DECODERS)):
        if value not in choices:
            raise OptionError(f"unknown {name.replace('_', ' ')} {value!r}", where=option_where(name),
                              hint=f"use one of {', '.join(choices)}")
    for name, value in (switches or {}).items():
        if value is not None:
            switch(value, name)
