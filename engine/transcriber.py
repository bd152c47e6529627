"""The Python API: ``WhisperEngine(model).transcribe(audio) -> Result``.

Audio -> log-mel (whole input) -> 30 s windows -> encoder once per window -> one decoding loop
per window, speculative or not, in the numerics chosen for that window before it starts.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .audio import SAMPLE_RATE, AudioInput, load_audio, speech_seconds
from .audio_ctx import choose_frames
from .backend import LoadedModel, SelfTestResult, check_not_forked
from .cores import default_threads, usable_cores
from .decoding_options import check_token_ids, seek_clips, window_prompt
from .drafters.base import Drafter, WindowContext, check_drafters
from .drafters.bigram import BigramGuesser
from .drafters.chain import DrafterChain
from .early_end import SILENCE_PEAK, first_sound, restart_frame
from .errors import OptionError, SpecWhisperError, warn_caller
from .fallback import (
    Attempt,
    ladder,
)
from .features import (
    N_FRAMES,
    content_frames,
    log_mel_spectrogram,
    short_window_features,
    window_features,
)
from .language_detection import vote_language
from .model_limits import MAX_POSITIONS
from .model_store import resolve_model
from .pipeline import EncoderAhead
from .policy import (
    FixedDraftLength,
    NoDrafts,
    VerifyCost,
    default_policy,
    realised_speedup,
)
from .results import Result, WindowResult
from .run_state import RunState
from .stats import DecodeStats
from .transcribe_options import TranscribeOptions, check_engine_options, checked_options
from .window_decode import WindowDecoder, WindowJob
from .window_numerics import WindowNumerics
from .window_segments import WindowSegments, early_end_applies

if TYPE_CHECKING:
    from specwhisper.tokenmap import TokenMap

    from .listen import CommandListener
    from .live import LiveStream



def _silent(samples: np.ndarray) -> bool:
    return samples.size == 0 or float(np.abs(samples).max()) < SILENCE_PEAK


LOOP_TOKENS_MIN = 60  # a short-context window emitting more than this, and ...
LOOP_TOKENS_PER_S = 10.0  # ... more than this per second of audio (speech runs at 3-5), is looping


def looks_like_a_loop(n_tokens: int, duration_s: float) -> bool:
    """Whether a short-context transcript is the decoder repeating itself (see benchmarks/RESULTS_audio_ctx.md)."""
    return n_tokens > max(LOOP_TOKENS_MIN, LOOP_TOKENS_PER_S * duration_s)


class _Unlearned:
    """The guesser of lockstep windows: they draft nothing, so it guesses nothing, and it learns
    nothing from one window thread while others run (the run's guesser learns each window's
    tokens in order once it is finished)."""

    def __init__(self, eot: int) -> None:
        self._eot = eot

    def __call__(self, tokens) -> int:
        return self._eot

    def learn(self, tokens) -> None:
        pass


def _attempt(window: WindowResult) -> Attempt:
    """A decoded window as the attempt the ladder's thresholds judge."""
    return Attempt(window.tokens, window.temperature, window.compression_ratio, window.avg_logprob,
                   window.no_speech_prob)


def _options_dict(opts: TranscribeOptions) -> dict:
    from dataclasses import asdict

    d = asdict(opts)
    d["progress"] = opts.progress
    for key in ("language", "task"):
        d.pop(key)
    return d


class Transcription:
    """A transcription under way: its language at once, its windows as they are decoded.

    Iterating decodes the next window (faster-whisper's lazy segments); ``result()`` decodes the
    rest and returns the whole ``Result``."""

    def __init__(self, engine: WhisperEngine, run: RunState, waveform: np.ndarray, windows: Iterator[WindowResult],
                 t_start: float) -> None:
        self.engine, self.run, self.waveform = engine, run, waveform
        self._windows, self._t_start = windows, t_start
        self._result: Result | None = None

    @property
    def language(self) -> str:
        return self.run.language or "en"

    @property
    def language_probability(self) -> float:
        return self.run.language_prob

    @property
    def language_probs(self) -> list[tuple[str, float]] | None:
        return self.run.language_probs

    def __iter__(self) -> Iterator[WindowResult]:
        for window in self._windows:
            self.run.timings["total_s"] = time.perf_counter() - self._t_start
            yield window

    def result(self) -> Result:
        if self._result is None:
            for _ in self:
                pass
            self.run.timings["total_s"] = time.perf_counter() - self._t_start
            self._result = self.engine._result(self.run, self.waveform)
        return self._result


class WhisperEngine:
    """A loaded model plus its drafters. Safe to call from several threads (windows are serialised)."""

    def __init__(self, model: str | Path | None = None, device: str = "cpu", compute_type: str = "int8",
                 threads: int | None = None, *, tokenmap: str | Path | TokenMap | None = None, learn: bool = False,
                 prompt_lookup: bool = True, draft_model: str | Path | None = None,
                 drafters: list[Drafter] | None = None,
                 verify_cost: VerifyCost | None = None, selftest: bool = True,
                 decoder_threads: int | None = None, pipeline: bool = True,
                 draft_ahead: bool | None = None, loaded: LoadedModel | None = None,
                 batch_decoder: str = "auto", encoder: str = "auto") -> None:
        """``model``: a registry name (``base``, the default; ``tiny.en``), a CTranslate2 model
        folder or a Hugging Face repo id; pulled into the model store on first use.
        ``threads``: CPU threads of the encoder (the decoder's are measured, ``decoder_threads``);
        default 2, or 1 where the process may use one core only (``cores``).
        ``tokenmap``: a token map (a ``.tmap`` path or a loaded ``TokenMap``) whose n-grams draft
        (domain commands); ``learn``: learn n-grams from this engine's own outputs as it goes
        (``save_learned`` writes them). ``prompt_lookup``: draft from the window's prompt and the
        text so far. ``draft_model``: a smaller model that drafts (e.g. ``tiny.en`` for ``base``);
        ``drafters``: your own (``drafters.base.Drafter``). Drafting changes speed, never text.
        ``selftest``: measure, once per machine and cached, which decoder calls are bitwise
        invariant (without it speculation is off). ``pipeline``: encode the next window while
        this one decodes.
        ``encoder``: ``auto`` (CTranslate2's encoder or a graph of its weights on ONNX Runtime or
        OpenVINO, whichever is fastest here, measured once and cached), ``ct2``, ``onnx`` or
        ``openvino`` (see ``encoders``).
        ``batch_decoder``: what batch-invariant windows decode on (``auto``: the fork's kernels
        where its self-test passes unless the ONNX Runtime invariant decoder is faster, in which
        case every window decodes on it, else the invariant decoder; ``ct2``; ``invariant``).
        ``draft_ahead``: run the draft model on its own thread ahead of the main decoder (default:
        on CPU where the decoder has an instance of its own, i.e. a core the decoder leaves idle).
        ``loaded``: the model of another engine, shared instead of loaded again (engines with other
        drafters on one model in memory; windows of all of them are decoded one at a time). Its
        device, threads, compute type, encoder and batch decoder hold (``device``, ``threads`` and
        ``compute_type`` are not read); an explicit ``encoder`` (other than the one it runs),
        ``batch_decoder`` (other than the one it was loaded with) or ``decoder_threads`` is an error."""
        threads = default_threads() if threads is None else threads
        check_engine_options(device=device, compute_type=compute_type, threads=threads, decoder_threads=decoder_threads,
                             encoder=encoder, batch_decoder=batch_decoder,
                             switches=dict(learn=learn, prompt_lookup=prompt_lookup, selftest=selftest,
                                           pipeline=pipeline, draft_ahead=draft_ahead))
        threads, decoder_threads = int(threads), None if decoder_threads is None else int(decoder_threads)
        drafters = check_drafters(drafters)  # before the load: a wrong one failed at the first window
        t0 = time.perf_counter()
        if loaded is not None:  # its device and threads hold for this engine's drafters too
            _check_shared_model(loaded, encoder=encoder, batch_decoder=batch_decoder, decoder_threads=decoder_threads)
            self.model_dir, self.lm = loaded.model_dir, loaded
            device, threads = loaded.device, loaded.threads
            compute_type = loaded.requested_compute_type
        else:
            check_not_forked()  # before anything that may wait on a lock a thread of the parent held
            self.model_dir = resolve_model(model, prefer_int8=compute_type.startswith("int8"))
            self.lm = LoadedModel(self.model_dir, device=device, compute_type=compute_type, threads=threads,
                                  decoder_threads=decoder_threads, batch_decoder=batch_decoder,
                                  encoder=encoder)
        self.tokenizer = self.lm.tokenizer
        # Cheap filler guesses learn from the outputs of one call (earlier windows of the same audio);
        # across calls only with learn=True, so that by default one file never speeds up another.
        self.learn = learn
        self.guesser = BigramGuesser(self.tokenizer)
        self.selftest_result: SelfTestResult | None = None
        if self.lm.has_step_api and selftest:
            self.selftest_result = self.lm.selftest()
            if self.selftest_result.row_floor is None:
                warnings.warn("batch-invariance self-test failed on this machine: decoding single-row with "
                              "speculation off (damaged weights fail it too: check them with 'specwhisper models "
                              f"verify {_verify_name(model, self.model_dir)}')", stacklevel=2)
        elif not self.lm.has_step_api:
            warnings.warn("this CTranslate2 build has no step API (prefill/forward_step): transcribing with "
                          "CT2 generate(); speculative decoding is unavailable here", stacklevel=2)
        self.row_floor = self.selftest_result.row_floor if self.selftest_result else None
        self.row_ceiling = (self.selftest_result.row_ceiling or 17) if self.selftest_result else 17
        if verify_cost is None and self.row_floor is not None:
            measured = self.lm.call_costs(result=self.selftest_result)
            verify_cost = VerifyCost(measured) if measured else None
        self.verify_cost = verify_cost or VerifyCost.default(device)
        self.drafters: list[Drafter] = drafters
        self.tokenmap_drafter = None
        # The language of the token map's transcripts: what ``transcribe``, ``stream`` and ``listen``
        # decode in where no language is given (detection on a short command is a guess).
        self.tokenmap_language: str | None = None
        if tokenmap is not None or learn:
            self.tokenmap_drafter = _make_tokenmap_drafter(tokenmap, self.tokenizer, learn)
            self.drafters.insert(0, self.tokenmap_drafter)
            self.tokenmap_language = _tokenmap_language(self.tokenmap_drafter.static, self.tokenizer)
        if prompt_lookup:
            from .drafters.prompt_lookup import PromptLookupDrafter

            self.drafters.append(PromptLookupDrafter())
        self.window_decoder = WindowDecoder(self.lm, self.tokenmap_drafter)
        self.window_segments = WindowSegments(self.lm)
        self.draft_drafter = None
        if draft_model is not None and self.row_floor is not None:
            from .drafters.draft_model import open_draft_drafter

            if draft_ahead is None:  # ahead needs a core the decoder leaves idle
                draft_ahead = device == "cpu" and self.lm.decoder is not self.lm.model and usable_cores() > 1
            self.draft_drafter = open_draft_drafter(draft_model, self.tokenizer, device=device,
                                                    compute_type=compute_type, threads=threads,
                                                    main_model_dir=self.model_dir, main_device=device,
                                                    ahead=draft_ahead)
            if self.draft_drafter is not None:  # only where the cost model says it pays
                # Ahead, its drafts are ready and cost the loop nothing: asked right after a domain
                # token map, which drafts only where it is confident (on car commands the orders
                # map/draft, draft/map and "longest proposal" were within noise, 1.12-1.15x). Serial,
                # it runs a model per proposal: asked last.
                first = 1 if self.tokenmap_drafter is not None else 0
                self.drafters.insert(first if draft_ahead else len(self.drafters), self.draft_drafter)
        elif draft_model is not None:
            warnings.warn("draft model ignored: speculation is unavailable on this machine", stacklevel=2)
        self.window_numerics = WindowNumerics(self.lm, self.selftest_result, self.verify_cost, self.draft_drafter)
        # Acceptance is learned across calls: a device keeps getting its own user's phrasing.
        # Priors until evidence arrives: a domain token map is expected to pay, prompt lookup alone is not.
        self.policy = default_policy(self.verify_cost, self.row_floor or 2, self.row_ceiling,
                                     strong=self.tokenmap_drafter is not None)
        # Encode window i + 1 while window i decodes, where they run on separate instances (see pipeline).
        self.pipeline = pipeline and self.lm.decoder is not self.lm.model
        self.load_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------
    def transcribe(self, audio: AudioInput, language: str | None = None, task: str = "transcribe", *,
                   sample_rate: int | None = None, **options) -> Result:
        """Transcribe ``audio`` (a path, bytes, a file object or samples: 16 kHz, or at
        ``sample_rate``, resampled as files are) in one call (see ``transcription`` for the language
        a token map sets)."""
        stream = self.transcription(audio, language, task, short_window_retry=True, sample_rate=sample_rate,
                                    **options)
        result = stream.result()
        run = stream.run
        opts, ctx_frames = run.opts, run.ctx_frames
        why = None
        if ctx_frames < N_FRAMES and looks_like_a_loop(len(result.tokens), result.duration_s):
            why = f"{ctx_frames} frames looped ({len(result.tokens)} tokens): decoded in full"
        elif ctx_frames < N_FRAMES and run.retry_ladder and any(opts.thresholds.failed(_attempt(w))
                                                                 for w in result.windows):
            why = f"{ctx_frames} frames failed at temperature {opts.temperature:g}: decoded in full"
        if why:
            # A short window sometimes repeats the utterance up to the token cap: decode it again in
            # full, with the temperatures the short window left out.
            retry = self.transcribe(stream.waveform, language=opts.language, task=opts.task,
                                    **{**_options_dict(opts), "audio_ctx": "full",
                                       "temperature": run.retry_ladder or opts.temperature})
            retry.timings["total_s"] += result.timings["total_s"] - result.timings["audio_s"]
            retry.audio_ctx_fallback = why
            retry.language_source = result.language_source
            return retry
        return result

    def transcription(self, audio: AudioInput, language: str | None = None, task: str = "transcribe",
                      short_window_retry: bool = False, *, sample_rate: int | None = None,
                      **options) -> Transcription:
        """Start a transcription whose windows are decoded as they are iterated (the language is
        known at once: detected now where not given, on the first window, whose encoder output
        the decoding then reuses). With a token map that records a language and no ``language``
        given, decodes in the map's language (``Result.language_source`` says where it came from).
        ``short_window_retry``: the caller decodes the audio again in full context where a short
        window fails (``transcribe`` does), so a short window tries the ladder's first temperature
        only: sampling a window that loops for want of context mostly loops again, to the token cap.
        ``sample_rate``: the rate of an array of samples (a 44.1 kHz array read as 16 kHz is
        confident nonsense); a file or bytes say their own."""
        if sample_rate is not None and not isinstance(audio, np.ndarray):
            raise OptionError("sample_rate is for an array of samples: a file or bytes say their own rate",
                              where="WhisperEngine.transcribe(sample_rate=...)", hint="leave sample_rate out")
        mapped = self._language_from_map(language, task, options)
        opts = checked_options("WhisperEngine.transcribe", language=mapped or language, task=task, **options)
        if opts.language is not None:
            opts = replace(opts, language=self.tokenizer.checked_language(opts.language))
        opts = replace(opts, task=self.tokenizer.checked_task(opts.task))
        check_token_ids(opts, self.tokenizer.vocab_size)
        if opts.hallucination_silence_threshold is not None and not opts.word_timestamps:
            warn_caller("hallucination_silence_threshold needs word_timestamps=True (as in faster-whisper, it has "
                        "no effect without word timings)")
        if opts.draft_len and (no_drafts := _no_drafts_because(opts)):
            warn_caller(f"draft_len={opts.draft_len} has no effect: {no_drafts} decodes without drafts")
        if opts.multilingual and not self.tokenizer.multilingual:
            opts = replace(opts, multilingual=False)
        t_start = time.perf_counter()
        waveform = load_audio(audio, sample_rate)
        t_audio = time.perf_counter()
        mel = log_mel_spectrogram(waveform, n_mels=self.lm.n_mels)
        n_content = content_frames(mel)
        ctx_frames = choose_frames(opts.audio_ctx, n_content)
        retry_ladder: tuple[float, ...] = ()
        if ctx_frames < N_FRAMES:
            mel = short_window_features(waveform, ctx_frames, n_mels=self.lm.n_mels)
            if short_window_retry and len(ladder(opts.temperature)) > 1:
                retry_ladder, opts = opts.temperature, replace(opts, temperature=ladder(opts.temperature)[0])
        if isinstance(opts.initial_prompt, str):
            initial = self.tokenizer.encode(" " + opts.initial_prompt.strip())
        else:
            initial = list(opts.initial_prompt or ())
        drafters = self.drafters
        if opts.draft_hint:
            from .drafters.previous_pass import PreviousPassDrafter

            drafters = [PreviousPassDrafter(opts.draft_hint, self.tokenizer.special.timestamp_begin)] + drafters
        run = RunState(opts=opts, ctx_frames=ctx_frames,
                   chain=_drafter_chain(drafters, opts),
                   policy=self.policy if opts.draft_len is None else FixedDraftLength(opts.draft_len),
                   language=opts.language, initial=initial, retry_ladder=retry_ladder,
                   guesser=self.guesser if self.learn else BigramGuesser(self.tokenizer),
                   timestamps=opts.timestamps == "on" or (opts.timestamps == "auto" and n_content > opts.window_frames),
                   language_source="token map" if mapped else "given" if opts.language else
                   ("detected" if self.tokenizer.multilingual else "english-only model"))
        run.n_content = n_content
        run.timings.update(load_s=self.load_seconds, audio_s=t_audio - t_start,
                           features_s=time.perf_counter() - t_audio)
        if run.language is None:
            self._detect_language(run, waveform, mel, n_content)
        if run.timestamps:
            if opts.batch_size > 1 and opts.clip_timestamps in ((), (0.0,)):  # no clips; it was taken without a word
                warn_caller(f"batch_size={opts.batch_size} has no effect with timestamps: a timestamped window starts "
                            "where the one before ended, so windows decode one at a time (timestamps='off' decodes "
                            "30 s windows together; BatchedInferencePipeline or --batch-size also cut at the VAD's "
                            "speech)")
            windows = self._transcribe_seeking(run, waveform, mel, n_content)
        else:
            windows = self._transcribe_fixed(run, waveform, mel, n_content)
        return Transcription(self, run, waveform, windows, t_start)

    def stream(self, language: str | None = None, task: str = "transcribe", step_s: float = 1.0,
               **options) -> LiveStream:
        """A live transcription: ``feed()`` it audio as it arrives and get committed text and the
        tentative tail back as events; ``finish()`` flushes (see ``live``). ``options``: those of
        ``transcribe`` that a live pass can take, and ``LiveStream``'s own. With a token map that
        records a language and no ``language`` given, every pass decodes in the map's language."""
        from .live import LiveStream

        language = self._language_from_map(language, task, options) or language
        return LiveStream(self, language, task, step_s, **options)

    def listen(self, language: str | None = None, task: str = "transcribe", **options) -> CommandListener:
        """Command mode: ``feed()`` it audio as it arrives; each utterance (speech, then
        ``silence_s`` of silence) is decoded once with ``transcribe`` and comes back as one
        ``CommandResult`` (see ``listen``). ``options``: ``CommandListener``'s own (endpointing,
        silence_s, max_utterance_s, ...) and those of ``transcribe``."""
        from .listen import CommandListener

        return CommandListener(self, language, task, **options)

    def _language_from_map(self, language: str | None, task: str, options: dict) -> str | None:
        """The token map's language where it applies: no language given (``"auto"`` asks for
        detection: it was overridden by the map and Swedish speech came out in English),
        transcription (a translation's source language is not its transcripts'), one language for
        the whole call."""
        if language is None and task == "transcribe" and not options.get("multilingual"):
            return self.tokenmap_language
        return None

    def _detect_language(self, run: RunState, waveform: np.ndarray, mel: np.ndarray, n_content: int) -> None:
        """The language of the first window(s) from the first clip on (``vote_language``; the
        windows are ``window_frames`` long, as faster-whisper's ``nb_max_frames``)."""
        if not self.tokenizer.multilingual:
            run.language = "en"
            return
        t0 = time.perf_counter()
        first, first_end = seek_clips(run.opts.clip_timestamps, n_content)[0]
        first, first_end = (first, first_end) if first < n_content else (0, n_content)

        def windows() -> Iterator[list[tuple[str, float]]]:
            window = run.opts.window_frames
            for i in range(run.opts.language_detection_segments):
                start = first + i * window
                if i and start >= n_content:
                    return
                end = min(start + window, first_end if i == 0 else n_content)
                features = self._window_features(run, waveform, mel, start, end, silence_ok=True)
                t1 = time.perf_counter()
                encoder_output = self.lm.encode(features)
                if i == 0:
                    run.first_encoded = (start, end, encoder_output, time.perf_counter() - t1)
                yield self.lm.language_probs(encoder_output)

        run.language, run.language_prob, run.language_probs = vote_language(
            windows(), run.opts.language_detection_threshold)
        run.timings["language_s"] += time.perf_counter() - t0 - (run.first_encoded[3] if run.first_encoded else 0)

    def _transcribe_fixed(self, run: RunState, waveform: np.ndarray, mel: np.ndarray,
                          n_content: int) -> Iterator[WindowResult]:
        """Back-to-back windows (``window_frames``, 30 s by default) without timestamps (of each
        clip); the next window encodes while one decodes, and independent windows decode in
        lockstep where ``batch_size`` asks."""
        clips = seek_clips(run.opts.clip_timestamps, n_content) if run.ctx_frames == N_FRAMES else [(0, n_content)]
        step = run.opts.window_frames
        spans = [(start, min(start + step, end)) for begin, end in clips
                 for start in range(begin, max(end, begin + 1), step) if start < max(end, 1)]
        progress = run.opts.progress

        def segment(index: int) -> np.ndarray | None:
            return self._window_features(run, waveform, mel, spans[index][0], spans[index][1])

        with EncoderAhead(self.lm.encode, segment, len(spans), enabled=self.pipeline) as ahead:
            if (slots := self._lockstep_slots(run, len(spans))) > 1:
                yield from self._transcribe_lockstep(run, waveform, ahead, spans, n_content, slots)
                return
            for index, (start, end) in enumerate(spans):
                if progress:
                    progress(start, n_content)
                window = self._transcribe_window(run, waveform, ahead, index, start, end)
                run.windows.append(window)
                yield window
        if progress:
            progress(n_content, n_content)

    def _lockstep_slots(self, run: RunState, n_windows: int) -> int:
        """How many windows to decode in lockstep (1: one at a time). Their tokens must not depend
        on ``batch_size``: windows that do not depend on each other (no previous text, no initial
        prompt, which only the first window would get), decoded greedily or sampled by the
        verifier (not CTranslate2's ``generate``) on the invariant decoder in the numerics the
        engine would choose for them anyway, its 1- and 2-thread sessions the same bits
        (``check.wide``), and at most ``row_ceiling`` rows a call (the self-test's range)."""
        opts, check = run.opts, self._window_selftest(run.ctx_frames)
        if opts.batch_size < 2 or n_windows < 2 or opts.condition_on_previous_text or run.initial \
                or opts.word_timestamps or any(opts.generate_only(t) for t in ladder(opts.temperature)) \
                or check is None or check.decoder != "invariant" or check.row_floor is None or not check.wide \
                or not (opts.numerics == "batch-invariant" or (opts.numerics == "auto" and check.preferred)):
            return 1
        return min(opts.batch_size, n_windows, check.row_ceiling or 1)

    def _transcribe_lockstep(self, run: RunState, waveform: np.ndarray, ahead: EncoderAhead,
                             spans: list[tuple[int, int]], n_content: int, slots: int) -> Iterator[WindowResult]:
        """Windows ``slots`` at a time, as faster-whisper's batched pipeline: the batch's windows
        encoded one after another with nothing beside (an encoder beside the decoder's calls
        slowed both by about 2x), then decoded by one thread each, their decoder calls meeting at
        one ``LockstepGate`` (see ``invariant_batch``), finished in order."""
        from concurrent.futures import ThreadPoolExecutor

        from .invariant_batch import GatedDecoder, LockstepGate

        progress = run.opts.progress
        gate = LockstepGate(self.lm.batch_decoder(self._window_selftest(run.ctx_frames)), slots, run.ctx_frames // 2)
        quiet = replace(run, chain=DrafterChain([]), guesser=_Unlearned(self.tokenizer.special.eot))

        def decode(job: WindowJob) -> Attempt:
            view = GatedDecoder(gate)
            try:
                return self.window_decoder.decode_with_fallback(quiet, job, decoder=view)
            finally:
                view.release()

        with ThreadPoolExecutor(slots, thread_name_prefix="lockstep") as pool:
            for first in range(0, len(spans), slots):
                jobs: list[WindowJob | WindowResult] = []
                for index in range(first, min(first + slots, len(spans))):
                    start, end = spans[index]
                    if progress:
                        progress(start, n_content)
                    samples = waveform[start * 160:end * 160]
                    if _silent(samples):
                        jobs.append(WindowResult(start / 100, end / 100, "", [], "skipped", "silence", {},
                                                 seek=start))
                        continue
                    with self.lm.lock:
                        jobs.append(self._prepare_window(run, ahead, index, start, end, samples, lockstep=True))
                futures = [pool.submit(decode, job) if isinstance(job, WindowJob) else None for job in jobs]
                try:
                    for job, future in zip(jobs, futures):
                        if future is None:
                            window = job
                        else:
                            attempt = future.result()
                            text = [t for t in attempt.tokens if t < self.tokenizer.special.eot]
                            run.guesser.learn(text)
                            run.chain.begin_learning(job.context)  # in window order, as one by one
                            run.chain.end_learning(text)
                            window = self._finish_window(run, job, attempt)
                        run.windows.append(window)
                        yield window
                finally:
                    for future in futures:
                        if future is not None:
                            future.cancel()
        run.lockstep = {"slots": slots, "calls": gate.calls, "rows": gate.rows}
        if progress:
            progress(n_content, n_content)

    def _transcribe_seeking(self, run: RunState, waveform: np.ndarray, mel: np.ndarray,
                            n_content: int) -> Iterator[WindowResult]:
        """Windows decoded with timestamps, each starting where the last complete segment ended
        (within each clip of ``clip_timestamps``), or where a window that ended early while speech
        went on left off (``early_end``); a window holds at most ``window_frames`` of audio.

        Where the next window starts is known only once this one is decoded, so nothing is
        encoded ahead."""
        progress = run.opts.progress
        clips = seek_clips(run.opts.clip_timestamps, n_content) if run.ctx_frames == N_FRAMES else [(0, n_content)]
        seek, index, end = 0, 0, n_content
        length = run.opts.window_frames
        restarted = False  # the last window was restarted at its last segment: the next only where Silero hears speech

        def segment(_index: int) -> np.ndarray | None:
            return self._window_features(run, waveform, mel, seek, min(seek + length, end))

        with EncoderAhead(self.lm.encode, segment, 1, enabled=False) as ahead:
            for clip_start, clip_end in clips:
                seek, end = max(seek, clip_start), clip_end
                while seek < max(end, 1) and (seek < end or index == 0):
                    if progress:
                        progress(seek, n_content)
                    if index > 0:  # a window after the first (which holds the prefix) may start at the sound
                        seek = first_sound(waveform, seek, min(seek + length, end))
                    window = self._transcribe_window(run, waveform, ahead, index, seek, min(seek + length, end))
                    restart = restart_frame(waveform, seek, window.segments[-1].end_s, round(window.end_s * 100),
                                            vad_only=restarted) \
                        if self._may_restart(run, window) and not (restarted and run.aligned_end) else None
                    if restart is not None:  # a cut-off segment after the restart is decoded again
                        window.end_s, run.tail = restart / 100, []
                    restarted = restart is not None
                    run.windows.append(window)
                    yield window
                    if run.ctx_frames < N_FRAMES:  # a short encoder window holds the whole (short) clip
                        return
                    seek = max(seek + 1, round(window.end_s * 100)) if window.numerics != "skipped" else \
                        min(seek + length, end)
                    index += 1
        if progress:
            progress(n_content, n_content)

    @staticmethod
    def _may_restart(run: RunState, window: WindowResult) -> bool:
        """Whether a window that ended with text may be asked whether speech went on after it
        (``early_end``): with full windows only (a short encoder window is the whole clip), and not
        where ``hallucination_silence_threshold`` decided where the next window starts."""
        return window.numerics != "skipped" and bool(window.segments) and early_end_applies(run)

    @staticmethod
    def _window_features(run: RunState, waveform: np.ndarray, mel: np.ndarray, start: int,
                         end: int, silence_ok: bool = False) -> np.ndarray | None:
        """The encoder input of the window from frame ``start`` to ``end``, or None where it is
        silence (unless ``silence_ok``)."""
        if not silence_ok and _silent(waveform[start * 160:end * 160]):
            return None
        return mel if run.ctx_frames < N_FRAMES else window_features(mel[:, :end], start)

    def _transcribe_window(self, run: RunState, waveform: np.ndarray, ahead: EncoderAhead, index: int, start: int,
                           end_frame: int) -> WindowResult:
        """Encode (or take the encoder output computed ahead) and decode the window from frame
        ``start`` to ``end_frame``: with fallback, silence skipping, segments and word timings."""
        samples = waveform[start * 160:end_frame * 160]
        if _silent(samples):
            return WindowResult(start / 100, end_frame / 100, "", [], "skipped", "silence", {}, seek=start)
        with self.lm.lock:
            job = self._prepare_window(run, ahead, index, start, end_frame, samples)
            attempt = self.window_decoder.decode_with_fallback(run, job)
        return self._finish_window(run, job, attempt)

    def _prepare_window(self, run: RunState, ahead: EncoderAhead, index: int, start: int, end_frame: int,
                        samples: np.ndarray, lockstep: bool = False) -> WindowJob:
        """What decoding the window needs: its numerics, encoder output, language and prompt (the
        model's lock held). ``lockstep``: decoded in a lockstep batch, which drafts nothing."""
        opts = run.opts
        # Chosen before encoding, so that a draft model's encoder can run beside the main one.
        check = self._window_selftest(run.ctx_frames)
        numerics, reason, window_policy = self.window_numerics.choose(opts, run.chain, run.policy,
                                                                      samples.size / SAMPLE_RATE, check)
        if lockstep:
            numerics, reason = "batch-invariant", "decoded in a lockstep batch on the invariant decoder"
        elif isinstance(window_policy, NoDrafts):
            reason += f"; {window_policy.why}"
        if (check is None or check.row_floor is None) and numerics == "batch-invariant":
            numerics, reason = "single-row", "no invariant row range for this encoder length"
        if numerics == "batch-invariant" and not lockstep:
            for drafter in run.chain.drafters:  # a draft model's encoder then runs beside the main one
                if hasattr(drafter, "prepare"):
                    drafter.prepare(samples)
        if run.first_encoded is not None and run.first_encoded[:2] == (start, end_frame):
            _, _, encoder_output, took = run.first_encoded
            waited = took
        else:
            encoder_output, took, waited = ahead.get(index)
        run.first_encoded = None
        run.timings["encoder_s"] += took
        run.timings["encoder_hidden_s"] += max(0.0, took - waited)
        language = run.language
        if opts.multilingual:
            t1 = time.perf_counter()
            language = self.lm.detect_language(encoder_output)[0]
            run.timings["language_s"] += time.perf_counter() - t1
        if not lockstep:  # a lockstep batch encodes its windows before any decodes
            ahead.start_after(index)  # the next window encodes while this one decodes
        # A draft model drafting this window decodes on the other core; one refused for it does not.
        drafting_model = not lockstep and any(getattr(d, "drafting", False) for d in run.chain.drafters)
        run.cpu_free = (lambda: False) if drafting_model else (lambda: not ahead.busy())
        previous = (run.initial + run.previous)[run.reset_since:]
        prompt, forced, sot_index = window_prompt(self.tokenizer, language, opts.task, previous, run.timestamps,
                                                  opts.prefix if start == 0 else None, opts.hotwords)
        context = WindowContext(prompt=tuple(prompt), eot=self.tokenizer.special.eot,
                                max_new_tokens=self._max_new(prompt, opts),
                                previous_tokens=tuple(run.previous + run.tail),
                                initial_prompt_tokens=tuple(run.initial),
                                audio=samples, window_index=index, speech_s=speech_seconds(samples))
        predicted = window_policy.expected_speedup()
        # a lockstep window drafts nothing: the policy's rate would predict drafts that never run
        return WindowJob(start, end_frame, numerics, reason, window_policy, check, encoder_output, language,
                         prompt, forced, sot_index, context, DecodeStats(),
                         None if lockstep or not math.isfinite(predicted) else predicted)

    def _finish_window(self, run: RunState, job: WindowJob, attempt: Attempt) -> WindowResult:
        """The window's result from its chosen attempt, and what the run carries to the next window."""
        opts, wstats, start, end_frame = run.opts, job.wstats, job.start, job.end_frame
        numerics, reason = job.numerics, job.reason
        if attempt.numerics != numerics:
            why = opts.generate_only(attempt.temperature) or "no draft after the first token"
            numerics, reason = attempt.numerics, f"{reason}, but {why}"
        run.stats.merge(wstats)
        if opts.thresholds.skip(attempt):
            return WindowResult(start / 100, end_frame / 100, "", [], "skipped",
                                f"no speech (p={attempt.no_speech_prob:.2f})", wstats.to_dict(), seek=start,
                                no_speech_prob=attempt.no_speech_prob, avg_logprob=attempt.avg_logprob)
        self.window_numerics.observe(len(attempt.tokens))
        run.timings["prefill_s"] += wstats.prefill_s
        run.timings["decoder_s"] += wstats.prefill_s + wstats.steps_s
        window = self.window_segments.result(run, attempt, start, end_frame, job.encoder_output, job.language,
                                             job.context.audio)
        window.numerics, window.numerics_reason, window.stats = numerics, reason, wstats.to_dict()
        cost = getattr(job.policy, "cost", self.verify_cost)
        window.stats["predicted_speedup"] = job.predicted
        window.stats["realised_speedup"] = realised_speedup(wstats.tokens, wstats.steps, wstats.calls_by_rows, cost)
        if run.dropped:  # decoded again from where the hallucination began: as if never decoded
            run.dropped = False
        elif not opts.condition_on_previous_text or attempt.temperature > opts.prompt_reset_on_temperature:
            run.reset_since = len(run.initial) + len(run.previous)
        return window


    @staticmethod
    def _max_new(prompt: list[int], opts: TranscribeOptions) -> int:
        limit = min(MAX_POSITIONS // 2, MAX_POSITIONS - (len(prompt) - 1))
        if opts.max_new_tokens is None:
            return limit
        if len(prompt) + opts.max_new_tokens > MAX_POSITIONS:
            raise OptionError(f"the prompt ({len(prompt)} tokens) plus max_new_tokens ({opts.max_new_tokens}) "
                              f"exceed the model's {MAX_POSITIONS} positions", where="max_new_tokens",
                              hint="use a shorter prompt or fewer new tokens")
        return min(limit, opts.max_new_tokens)

    def _result(self, run: RunState, waveform: np.ndarray) -> Result:
        used = {w.numerics for w in run.windows if w.numerics != "skipped"}
        numerics = used.pop() if len(used) == 1 else ("mixed" if used else "none")
        return Result(text="".join(w.text for w in run.windows).strip(), tokens=run.tokens,
                      language=run.language or "en", language_probability=run.language_prob, numerics=numerics,
                      duration_s=waveform.size / SAMPLE_RATE, timings=run.timings,
                      stats=dict(run.stats.to_dict(), **({"lockstep": run.lockstep} if run.lockstep else {})),
                      windows=run.windows, model=str(self.model_dir), device=self.lm.device,
                      compute_type=self.lm.compute_type, threads=self.lm.threads,
                      decoder_threads=self.lm.decoder_threads, row_floor=self.row_floor,
                      row_ceiling=self.row_ceiling, speculation_available=self.row_floor is not None,
                      batch_decoder=self.selftest_result.decoder if self.selftest_result else "ct2",
                      contract=self.selftest_result.contract if self.selftest_result else "none: no self-test",
                      encoder=self.lm.encoder_choice.name,
                      audio_ctx=run.ctx_frames, temperature=run.retry_ladder or run.opts.temperature, seed=run.opts.seed,
                      timestamps=run.timestamps, language_source=run.language_source, task=run.opts.task)

    # ------------------------------------------------------------------------------------------
    def auto_numerics(self, speculation: bool = True, draft_len: int | None = None) -> tuple[str, str]:
        """The numerics ``auto`` gives a 30 s window now, and why: what a batch job settles for all
        its inputs (``batch.decisions``), so that a file's text does not depend on what the engine
        that decoded it had learned from other files, nor on which worker that was."""
        opts = TranscribeOptions(speculation=speculation, draft_len=draft_len)
        numerics, reason, _ = self.window_numerics.choose(opts, _drafter_chain(self.drafters, opts), self.policy,
                                                          check=self.selftest_result)
        if self.draft_drafter is not None:
            self.draft_drafter.enabled = False  # asked, not decoding: the next window decides again
        return numerics, reason

    def _window_selftest(self, ctx_frames: int) -> SelfTestResult | None:
        """The self-test for this encoder length (it runs once per fixed size)."""
        if ctx_frames == N_FRAMES or self.selftest_result is None:
            return self.selftest_result
        return self.lm.selftest(encoder_frames=ctx_frames // 2)

    def close(self) -> None:
        """Stop the draft model's ahead thread and wait for it (dropping the engine stops it too):
        once this returns the engine runs no thread of its own. The engine still transcribes
        afterwards, without the draft model. Encoder-ahead threads live only within a call."""
        if self.draft_drafter is not None:
            self.draft_drafter.close()

    def __enter__(self) -> WhisperEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    def save_learned(self, path: str | Path) -> Path:
        """Write the online-learned token map (``--learn-save``) atomically."""
        if self.tokenmap_drafter is None:
            raise SpecWhisperError("nothing learned: the engine was created without learn=True",
                                   where="--learn-save", hint="add --learn")
        return self.tokenmap_drafter.save(path)


def _drafter_chain(drafters: list[Drafter], opts: TranscribeOptions) -> DrafterChain:
    """The drafters a call asks (none with speculation off or ``draft_len=0``: a learning token
    map then still learns each window's text, as ``--learn`` promises, without drafting)."""
    if opts.speculation and opts.draft_len != 0:
        return DrafterChain(drafters)
    return DrafterChain([], learners=[d for d in drafters if getattr(d, "learns", False)])


def _check_shared_model(loaded: LoadedModel, *, encoder: str, batch_decoder: str,
                        decoder_threads: int | None) -> None:
    """Refuse settings an engine on a shared model cannot have (they belong to the model, which
    another engine loaded): silently running with the shared model's would mislead a benchmark."""
    from .backend import BATCH_DECODERS
    from .encoders import ENCODERS

    for name, value, known in (("encoder", encoder, ENCODERS), ("batch_decoder", batch_decoder, BATCH_DECODERS)):
        if value not in known:
            raise OptionError(f"unknown {name} {value!r}", where=f"WhisperEngine({name}=...)",
                              hint=f"use one of {', '.join(known)}")
    conflicts = [f"{name}={asked!r} (it has {has!r})" for name, asked, has, default in (
        ("encoder", encoder, loaded.encoder_choice.name, "auto"),
        ("batch_decoder", batch_decoder, loaded.batch_decoder_choice, "auto"),
        ("decoder_threads", decoder_threads, loaded.decoder_threads, None)) if asked != default and asked != has]
    if conflicts:
        raise OptionError(f"the shared model cannot take {', '.join(conflicts)}", where="WhisperEngine(loaded=...)",
                          hint="leave these out to use the shared model's, or load the model again with them")


def _tokenmap_language(tmap, tokenizer) -> str | None:
    """The language a token map records, checked against the model (None: the map implies none;
    English-only models transcribe English whatever the map says, so it implies nothing there)."""
    language = tmap.header.language if tmap is not None else None
    if language is None or not tokenizer.multilingual:
        if language not in (None, "en"):
            warnings.warn(f"token map {tmap.source} records language {language!r}, but this model transcribes "
                          "English only: the map's language is ignored", stacklevel=3)
        return None
    try:
        tokenizer.language_token(language)
    except SpecWhisperError:
        from .errors import TokenMapError

        raise TokenMapError(f"token map records language {language!r}, which this model does not know",
                            where=tmap.source, hint="rebuild it with: specwhisper tokenmap build ... "
                                                    "--language CODE (or --language none)") from None
    if language == "en" and (why := _not_english_text(tmap, tokenizer)) is not None:
        warnings.warn(f"token map {tmap.source} records English, but its text is not ({why}): a map built without "
                      "--language by a version that did not ask; its language is not used (detected instead). "
                      "Rebuild it with --language CODE", stacklevel=3)
        return None
    return language


# The most frequent tokens of a map whose script is looked at: enough to tell Japanese from
# English, cheap at load (decoding one token takes microseconds).
LANGUAGE_CHECK_TOKENS = 2000


def _not_english_text(tmap, tokenizer) -> str | None:
    """Why a map's own tokens cannot be English text (most letters outside the Latin alphabets),
    or None. Builds of earlier versions recorded English for any transcripts given without
    ``--language``, and decoding Japanese speech in English came out as a translation."""
    from specwhisper.tokenmap.corpus import why_not_english

    arrays = tmap.arrays
    tokens = arrays.token[1:]
    ordinary = tokens < tokenizer.special.eot
    top = np.argsort(-arrays.count[1:][ordinary], kind="stable")[:LANGUAGE_CHECK_TOKENS]
    return why_not_english([tokenizer.decode([int(t)]) for t in np.unique(tokens[ordinary][top])])


def _no_drafts_because(opts: TranscribeOptions) -> str | None:
    """Why options decode without drafts whatever the draft length (a fixed ``draft_len`` given
    with them did nothing and said nothing), or None."""
    if not opts.speculation:
        return "speculation off"
    if opts.numerics == "single-row":
        return "single-row numerics"
    # beam search only where no attempt of the ladder samples (sampling attempts draft)
    return opts.generate_only() if all(opts.generate_only(t) for t in ladder(opts.temperature)) else None


def _verify_name(model, model_dir: Path) -> str:
    """What ``models verify`` takes for this model: a store model's name (its weights' checksum is
    known), else its folder."""
    from .model_store import REGISTRY, models_dir

    for name in (str(model), model_dir.name.removesuffix("-int8")):
        if name in REGISTRY and model_dir.resolve().parent == models_dir().resolve():
            return name
    return str(model_dir)


def _make_tokenmap_drafter(path: str | Path | TokenMap | None, tokenizer, learn: bool) -> Drafter:
    from .drafters.tokenmap_drafter import TokenMapDrafter
    from .tokenmap import load_token_map

    static = load_token_map(path, tokenizer) if path is not None else None
    return TokenMapDrafter(static, tokenizer, learn=learn)
