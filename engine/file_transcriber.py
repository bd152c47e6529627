"""One file in, one transcript out, as the command line decides it: the engine built from the
command's options, and how a file is transcribed (the engine itself, or faster-whisper's API over it
with --vad / --batch-size). ``transcribe`` and ``batch`` (every worker of it) share this, so a file
gets the same text whichever ran it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .cli_fw import FwTranscript, Progress, check_fw_options, transcribe_fw

if TYPE_CHECKING:
    from .results import Result
    from .transcriber import WhisperEngine
    from .writers import CueOptions

FileTranscriber = Callable[[str, Progress], "Result | FwTranscript"]


def check_decoding_options(args) -> CueOptions:
    """The per-call options, checked before the model loads (a typo costs no load time; an empty
    ``--initial-prompt`` becomes none); returns how srt/vtt cues are cut."""
    from .tokenizer import language_code
    from .transcribe_options import TranscribeOptions

    cues = check_fw_options(args)
    args.language = language_code(args.language)  # once, not as each file's failure ("FR" as "fr")
    if args.initial_prompt is not None and not args.initial_prompt.strip():
        args.initial_prompt = None  # an empty --initial-prompt is none (encoded, it would be a space token)
    TranscribeOptions(task=args.task, numerics=args.numerics, draft_len=args.draft_len, audio_ctx=args.audio_ctx,
                      temperature=args.temperature, seed=args.seed, timestamps=args.timestamps,
                      beam_size=args.beam_size, word_timestamps=args.word_timestamps,
                      no_speech_threshold=args.no_speech_threshold, log_prob_threshold=args.log_prob_threshold,
                      initial_prompt=args.initial_prompt, hotwords=getattr(args, "hotwords", None))
    return cues


def check_learn_save(args) -> None:
    """``--learn-save`` needs ``--learn``, and a path it can write: checked before any decoding, so
    that a run's learning is not lost to a read-only folder found at its end."""
    from .errors import SpecWhisperError
    from .io_utils import check_writable

    if args.learn_save and not args.learn:
        raise SpecWhisperError("--learn-save needs --learn", where="--learn-save", hint="add --learn")
    if args.learn_save:
        check_writable(args.learn_save, "the learned token map", "--learn-save")


def open_transcriber(args) -> tuple[WhisperEngine, FileTranscriber]:
    """Load the model; returns the engine and how one file is transcribed: by the engine, or with
    --vad / --batch-size by faster-whisper's API over it (``WhisperModel.transcribe(vad_filter=True)``,
    ``BatchedInferencePipeline``), so that VAD and batching are exactly the facade's."""
    from .transcriber import WhisperEngine

    engine_options = dict(tokenmap=args.tokenmap, learn=args.learn, prompt_lookup=args.prompt_lookup,
                          draft_model=args.draft_model, decoder_threads=args.decoder_threads,
                          batch_decoder=getattr(args, "batch_decoder", "auto"),
                          encoder=getattr(args, "encoder", "auto"))
    if args.vad or args.batch_size is not None:
        from .whisper_model import WhisperModel

        model = WhisperModel(args.model, device=args.device, compute_type=args.compute_type,
                             cpu_threads=args.threads, **engine_options)
        return model.engine, lambda path, progress: transcribe_fw(model, path, args, progress)
    engine = WhisperEngine(args.model, device=args.device, compute_type=args.compute_type, threads=args.threads,
                           **engine_options)

    def transcribe_file(path: str, progress: Progress) -> Result:
        return engine.transcribe(path, language=args.language, task=args.task, numerics=args.numerics,
                                 numerics_from_auto=getattr(args, "numerics_from_auto", False),
                                 speculation=not args.no_speculation, draft_len=args.draft_len,
                                 initial_prompt=args.initial_prompt,
                                 condition_on_previous_text=args.condition_on_previous_text,
                                 audio_ctx=args.audio_ctx, temperature=args.temperature, seed=args.seed,
                                 timestamps=args.timestamps, beam_size=args.beam_size,
                                 word_timestamps=args.word_timestamps,
                                 hallucination_silence_threshold=args.hallucination_silence_threshold,
                                 no_speech_threshold=args.no_speech_threshold,
                                 log_prob_threshold=args.log_prob_threshold, progress=progress)

    return engine, transcribe_file
