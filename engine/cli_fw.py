"""faster-whisper's options on the ``transcribe`` command: the flags, their checks (before the
model loads), and --vad / --batch-size run through faster-whisper's API over the engine
(``WhisperModel.transcribe(vad_filter=True)``, ``BatchedInferencePipeline``), so that VAD and
batching are exactly the facade's; subtitles cut by words as openai-whisper's CLI cuts them."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .errors import SpecWhisperError

if TYPE_CHECKING:
    from .results import Segment
    from .whisper_model import WhisperModel
    from .writers import CueOptions

Progress = Callable[[int, int], None] | None

def add_fw_args(t: argparse.ArgumentParser) -> None:
    """faster-whisper's user-facing options, and openai-whisper's way of cutting subtitles by words."""
    g = t.add_argument_group("faster-whisper's options")
    g.add_argument("--beam-size", type=int, default=1, metavar="N",
                   help="1 (default): greedy decoding, where speculation runs; N > 1: CTranslate2's beam search "
                        "with speculation off (JSON numerics: beam-search)")
    g.add_argument("--word-timestamps", action="store_true",
                   help="time every word (faster-whisper's alignment rules): JSON segments carry words "
                        "(start, end, word, probability), and srt/vtt can be cut by words")
    g.add_argument("--hallucination-silence-threshold", type=float, default=None, metavar="S",
                   help="with --word-timestamps: skip silences longer than S seconds around a segment whose words "
                        "look hallucinated, and decode again after them (openai-whisper's and faster-whisper's rule)")
    g.add_argument("--no-speech-threshold", type=float, default=None, metavar="P",
                   help="skip a window whose <|nospeech|> probability is above P while its text is unlikely "
                        "(below --log-prob-threshold): Whisper's no-speech rule, off by default (faster-whisper's "
                        "and openai-whisper's 0.6 with -1: noise then makes no text, but some spoken one-word clips are skipped "
                        "too)")
    g.add_argument("--log-prob-threshold", type=float, default=None, metavar="L",
                   help="decode a window again at the next temperature while its mean token log-probability is "
                        "below L (e.g. -1), and the no-speech rule's second half; off by default")
    g.add_argument("--vad", action="store_true",
                   help="decode only the speech Silero VAD finds, joined (faster-whisper's vad_filter; needs the "
                        "[vad] extra); times are those of the original audio")
    g.add_argument("--vad-threshold", type=float, default=None, metavar="P",
                   help="with --vad: speech probability from which a frame is speech (default 0.5)")
    g.add_argument("--vad-min-silence-ms", type=int, default=None, metavar="MS",
                   help="with --vad: silence that ends a speech chunk (default 2000; 160 with --batch-size)")
    g.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="faster-whisper's BatchedInferencePipeline: VAD speech chunks of up to 30 s decoded as "
                        "independent windows (implies --vad; no previous text, first temperature only, no "
                        "timestamps unless --timestamps on). N chunks decode in lockstep where the invariant decoder "
                        "runs, else one after another; N never changes the text")
    g.add_argument("--max-line-width", type=int, default=None, metavar="N",
                   help="srt/vtt: wrap each cue's text into lines of at most N characters, breaking between "
                        "words (needs --word-timestamps: an error without it)")
    g.add_argument("--max-words-per-line", type=int, default=None, metavar="N",
                   help="srt/vtt: cut each segment into cues of at most N words, timed by their words (needs "
                        "--word-timestamps: an error without it; with --max-line-width, lines wrap within cues)")


BATCHED_MIN_SILENCE_MS = 160  # faster-whisper's BatchedInferencePipeline default (its VadOptions: 2000)


def check_fw_options(args) -> CueOptions:
    """faster-whisper's flags, checked before the model loads; returns how srt/vtt cues are cut."""
    from .writers import CueOptions

    _at_least(args.threads, 1, "--threads", "use e.g. 2")
    _at_least(args.beam_size, 1, "--beam-size", "use 1 (greedy, speculated) or more (beam search, e.g. 5)")
    _at_least(args.batch_size, 1, "--batch-size", "use e.g. 8, or leave it out")
    _at_least(args.max_line_width, 1, "--max-line-width", "use e.g. 42 (characters)")
    _at_least(args.max_words_per_line, 1, "--max-words-per-line", "use e.g. 5 (words)")
    for flag, value in (("--max-line-width", args.max_line_width), ("--max-words-per-line", args.max_words_per_line)):
        if value is not None and not args.word_timestamps:
            raise SpecWhisperError(f"{flag} cuts subtitles at word times, but word timestamps are off", where=flag,
                                   hint="add --word-timestamps")
        if value is not None and args.output_format not in ("srt", "vtt"):
            warnings.warn(f"{flag} shapes srt and vtt cues only: no effect on {args.output_format} output",
                          stacklevel=2)
    _check_vad(args)
    threshold = getattr(args, "hallucination_silence_threshold", None)
    if threshold is not None and not args.word_timestamps:
        raise SpecWhisperError("--hallucination-silence-threshold judges segments by their word timings, but word "
                               "timestamps are off", where="--hallucination-silence-threshold",
                               hint="add --word-timestamps")
    if threshold is not None and not threshold > 0:
        raise SpecWhisperError(f"--hallucination-silence-threshold must be a positive number of seconds, got "
                               f"{threshold}", where="--hallucination-silence-threshold", hint="use e.g. 2")
    if args.batch_size is not None and args.condition_on_previous_text:
        warnings.warn("--condition-on-previous-text has no effect with --batch-size: chunks decode independently",
                      stacklevel=2)
    return CueOptions(args.max_line_width, args.max_words_per_line)


def _at_least(value: int | None, minimum: int, flag: str, hint: str) -> None:
    if value is not None and value < minimum:
        raise SpecWhisperError(f"{flag} must be at least {minimum}, got {value}", where=flag, hint=hint)


def _check_vad(args) -> None:
    """VAD flags make sense with the VAD on; its model loads now, before Whisper's, so that a missing
    [vad] extra costs no model load."""
    tuned = [flag for flag, value in (("--vad-threshold", args.vad_threshold),
                                      ("--vad-min-silence-ms", args.vad_min_silence_ms)) if value is not None]
    if not (args.vad or args.batch_size is not None):
        if tuned:
            raise SpecWhisperError(f"{tuned[0]} tunes the VAD, which is off", where=tuned[0],
                                   hint="add --vad (or --batch-size)")
        return
    if args.vad_threshold is not None and not (0.0 <= args.vad_threshold <= 1.0):  # NaN fails too
        raise SpecWhisperError(f"--vad-threshold must be a probability from 0 to 1, got {args.vad_threshold}",
                               where="--vad-threshold", hint="use e.g. 0.5 (the default)")
    _at_least(args.vad_min_silence_ms, 0, "--vad-min-silence-ms", "use e.g. 500 (milliseconds)")
    from .vad import get_vad_model

    try:
        get_vad_model()
    except SpecWhisperError as exc:
        where = exc.where if (exc.where or "").startswith("$") else "--vad"
        hint = (exc.hint or "").replace("pass vad_filter=False", "leave out --vad and --batch-size")
        raise SpecWhisperError(exc.what, where=where, hint=hint or None) from None


def _vad_parameters(args) -> dict | None:
    """--vad-threshold / --vad-min-silence-ms as faster-whisper's ``vad_parameters``; None where neither
    is given, so that each API keeps its defaults. A dict replaces the batched pipeline's 160 ms of
    silence by VadOptions' 2000 (faster-whisper's rule): 160 is kept unless given."""
    given = {"threshold": args.vad_threshold, "min_silence_duration_ms": args.vad_min_silence_ms}
    params = {key: value for key, value in given.items() if value is not None}
    if params and args.batch_size is not None:
        params.setdefault("min_silence_duration_ms", BATCHED_MIN_SILENCE_MS)
    return params or None


def _fw_kwargs(args) -> dict:
    """The CLI's decoding flags as faster-whisper's arguments, at the engine's defaults rather than
    faster-whisper's (beam 5, best_of 5, log-prob and no-speech thresholds unless given), so that --vad and
    --batch-size change which audio is decoded, not how; our options go as its extra keywords."""
    from .fallback import parse_temperatures

    # "auto" decides on the file's length (with --vad too: WhisperModel.transcribe); batched chunks
    # (at most 30 s each) decode without timestamps, as faster-whisper's pipeline does.
    timestamps = "off" if args.batch_size is not None and args.timestamps == "auto" else args.timestamps
    return dict(language=args.language, task=args.task, beam_size=args.beam_size, best_of=1,
                temperature=parse_temperatures(args.temperature), log_prob_threshold=args.log_prob_threshold,
                no_speech_threshold=args.no_speech_threshold, condition_on_previous_text=args.condition_on_previous_text,
                initial_prompt=args.initial_prompt, word_timestamps=args.word_timestamps, vad_filter=True,
                hallucination_silence_threshold=args.hallucination_silence_threshold,
                vad_parameters=_vad_parameters(args), numerics=args.numerics, speculation=not args.no_speculation,
                draft_len=args.draft_len, audio_ctx=args.audio_ctx, seed=args.seed, timestamps=timestamps,
                scores=False)  # scored where the thresholds need it (the engine knows)


def transcribe_fw(model: WhisperModel, path: str, args, progress: Progress) -> FwTranscript:
    """One file through faster-whisper's API: ``WhisperModel.transcribe`` with its VAD filter, or
    with --batch-size ``BatchedInferencePipeline``."""
    from .whisper_model import BatchedInferencePipeline

    if args.batch_size is None:
        segments, info = model.transcribe(path, progress=progress, **_fw_kwargs(args))
    else:
        segments, info = BatchedInferencePipeline(model).transcribe(path, batch_size=args.batch_size,
                                                                    **_fw_kwargs(args))
    segments = list(segments)  # the engine's account fills once the segments are read
    return FwTranscript.of(segments, info, model.engine.tokenizer.special.eot, args.batch_size)


@dataclass
class FwTranscript:
    """A file transcribed through faster-whisper's API, read by the writers and --stats as a
    ``Result`` is. Times are the original audio's; ``account``: the engine's;
    ``info``: language, durations before and after VAD, VAD options, batch size."""

    text: str
    tokens: list[int]
    segments: list[Segment]
    account: dict
    info: dict

    @classmethod
    def of(cls, fw_segments: list, info, eot: int, batch_size: int | None) -> FwTranscript:
        from .results import Segment

        segments = [Segment(s.start, s.end, s.text, list(s.tokens), s.words) for s in fw_segments]
        vad = None if info.vad_options is None else {
            key: (None if value == float("inf") else value) for key, value in asdict(info.vad_options).items()}
        return cls(text="".join(s.text for s in segments).strip(),
                   tokens=[t for s in segments for t in s.tokens if t < eot],
                   segments=segments, account=_account(info.specwhisper),
                   info={"language": info.language, "language_probability": round(info.language_probability, 4),
                         "duration_s": round(info.duration, 3),
                         "duration_after_vad_s": round(info.duration_after_vad, 3), "vad": vad,
                         "batch_size": batch_size})

    @property
    def numerics(self) -> str:
        return self.account["numerics"]

    @property
    def duration_s(self) -> float:
        return self.info["duration_s"]

    @property
    def language(self) -> str:
        return self.info["language"]

    @property
    def language_source(self) -> str:
        return self.account.get("language_source", "")

    @property
    def row_floor(self) -> int | None:
        return self.account.get("row_floor")

    @property
    def stats(self) -> dict:
        return self.account["stats"]

    @property
    def timings(self) -> dict:
        return self.account["timings"]

    def to_dict(self) -> dict:
        return {"text": self.text, "tokens": self.tokens, **self.account, **self.info,
                "segments": [s.to_dict() for s in self.segments]}


def _account(account: dict) -> dict:
    """The engine's account of a file, or an empty one where no speech was found (nothing decoded)."""
    from .stats import DecodeStats

    return account or {"numerics": "none", "timings": {}, "stats": DecodeStats().to_dict()}
