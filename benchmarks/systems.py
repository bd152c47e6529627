"""The systems one benchmark run compares, all on the same clips, threads and compute type.

In our process: our engine (greedy in both numerics, each drafter, the combined policy) and the
fork's own ``generate`` / ``generate_speculative``. In the peer process (``peer_env``): upstream
CT2 ``generate`` greedy and faster-whisper greedy and default. Every system returns the same
record shape: text, text tokens (specials removed), timings (load, features, encoder, decoder,
total), decoding stats and RSS.
"""

from __future__ import annotations

import inspect
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .data import Clip

MAX_NEW_TOKENS = 224  # the engine's per-window cap (half the decoder's 448 positions)


@dataclass(frozen=True)
class SystemSpec:
    name: str
    where: str  # "ours" | "fork" | "peer"
    description: str


SYSTEMS: dict[str, SystemSpec] = {s.name: s for s in (
    SystemSpec("greedy-single-row", "ours", "our loop, no speculation, single-row numerics (= CT2 greedy)"),
    SystemSpec("greedy-batch-invariant", "ours", "our loop, no speculation, batch-invariant numerics"),
    SystemSpec("spec-tokenmap", "ours", "our engine, domain token map drafter only (domain sets)"),
    SystemSpec("spec-prompt-lookup", "ours", "our engine, prompt-lookup drafter only"),
    SystemSpec("spec-draft-model", "ours", "our engine, draft-model drafter only (--draft)"),
    SystemSpec("spec-combined", "ours", "our engine, all drafters, numerics=auto (what users get)"),
    SystemSpec("spec-combined-onnx", "ours", "spec-combined with the main encoder pinned to ONNX Runtime's graph "
               "(what the encoder choice adds, side by side)"),
    SystemSpec("fork-generate", "fork", "the fork's generate(), beam 1"),
    SystemSpec("fork-spec-self", "fork", "the fork's C++ generate_speculative, draft = the model itself"),
    SystemSpec("fork-spec-draft", "fork", "the fork's C++ generate_speculative, draft = --draft with d2m/m2d"),
    SystemSpec("ct2-greedy", "peer", "upstream CTranslate2 generate(), beam 1 (peer venv)"),
    SystemSpec("fw-greedy", "peer", "faster-whisper beam 1, temperature 0, timestamps beyond 30 s (peer venv)"),
    SystemSpec("fw-default", "peer", "faster-whisper defaults: beam 5, fallback, timestamps (peer venv)"),
)}

# Which greedy run a system's tokens must equal ("identical to greedy"): speculation runs in
# batch-invariant numerics, everything else is compared with single-row greedy (= CT2 generate).
REFERENCE_FOR = {name: ("greedy-batch-invariant" if name.startswith("spec-") and not name.startswith("spec-combined")
                        else "greedy-single-row") for name in SYSTEMS if not name.startswith("greedy-")}
REFERENCE_FOR["greedy-batch-invariant"] = "greedy-single-row"


class Unavailable(Exception):
    """A system cannot run here (or on this set); the reason goes into the results."""


@dataclass
class BenchConfig:
    model: str
    device: str = "cpu"
    compute_type: str = "int8"
    threads: int = 2
    decoder_threads: int | None = None  # None: the engine measures its choice
    draft: str | None = "tiny.en"
    spec_k: int = 4
    encoder: str = "auto"
    audio_ctx: str = "full"
    # Our systems' temperature: 0 (greedy only) by default, as fw-greedy's, so that a window that
    # loops costs both the same; the engine's own default is the fallback ladder.
    temperature: str = "0"


@dataclass
class SetContext:
    """What a system may need to know about the set being run."""

    name: str
    tokenmap: Path | None = None
    tokenmap_error: str | None = None


def process_rss() -> dict[str, float | None]:
    """Current and peak RSS of this process, MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    current = None
    try:
        with open("/proc/self/statm") as f:
            current = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        pass
    return {"rss_mb": current, "peak_rss_mb": peak}


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _explicit(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class EnginePool:
    """Loaded engines by drafter configuration, so systems that differ only in options share one."""

    config: BenchConfig
    engines: dict[tuple, object] = field(default_factory=dict)

    def get(self, *, tokenmap: Path | None = None, prompt_lookup: bool = False, draft_model: str | None = None,
            encoder: str | None = None):
        """An engine with exactly these drafters (and ``encoder``, else the run's); options the engine
        does not know raise Unavailable."""
        from specwhisper import WhisperEngine

        encoder = encoder or self.config.encoder
        key = (str(tokenmap) if tokenmap else None, prompt_lookup, draft_model, encoder)
        if key in self.engines:
            return self.engines[key]
        kwargs: dict = {"device": self.config.device, "compute_type": self.config.compute_type,
                        "threads": self.config.threads}
        if _explicit(WhisperEngine.__init__, "encoder"):
            kwargs["encoder"] = encoder
        if self.config.decoder_threads is not None:
            kwargs["decoder_threads"] = self.config.decoder_threads
        wanted = {"tokenmap": str(tokenmap) if tokenmap else None, "prompt_lookup": prompt_lookup,
                  "draft_model": draft_model}
        for name, value in wanted.items():
            if _explicit(WhisperEngine.__init__, name):
                kwargs[name] = value
            elif name == "draft_model" and value and _explicit(WhisperEngine.__init__, "drafters"):
                kwargs["drafters"] = [self._draft_drafter(value)]
            elif value not in (None, False):
                raise Unavailable(f"WhisperEngine has no {name} option yet")
        engine = WhisperEngine(self.config.model, **kwargs)
        self.engines[key] = engine
        return engine

    def greedy(self):
        return self.get()

    def keep_tokenmap(self, tokenmap: Path | None) -> None:
        """Drop engines built for another set's token map (each holds a loaded model)."""
        keep = str(tokenmap) if tokenmap else None
        for key in [k for k in self.engines if k[0] is not None and k[0] != keep]:
            del self.engines[key]

    def _draft_drafter(self, draft: str):
        """The draft-model drafter built by hand, for engines that take ``drafters=`` but no ``draft_model=``."""
        try:
            from specwhisper.drafters.draft_model import DraftModelDrafter
        except ImportError as exc:
            raise Unavailable(f"no draft-model drafter in this specwhisper ({exc})") from None
        from specwhisper.model_store import resolve_model
        from specwhisper.tokenizer import WhisperTokenizer

        main_dir = resolve_model(self.config.model)
        cfg = self.config
        return DraftModelDrafter(draft, WhisperTokenizer.from_model_dir(main_dir), device=cfg.device,
                                 compute_type=cfg.compute_type, threads=cfg.threads, main_model_dir=main_dir)


def ct2_model(engine):
    """The fork's ``ctranslate2.models.Whisper`` under an engine (the encoder's instance)."""
    lm = getattr(engine, "lm", None)
    return lm.model if lm is not None else engine.model


def ct2_decoder(engine):
    """The instance our engine decodes with (its faster thread count): the fork's own loops get it
    too, so that they are compared with ours on equal threads."""
    lm = getattr(engine, "lm", None)
    return getattr(lm, "decoder", None) or ct2_model(engine)


class EngineSystem:
    """Our engine's ``transcribe`` with one drafter configuration and numerics."""

    def __init__(self, name: str, pool: EnginePool, *, numerics: str, speculation: bool, tokenmap: bool = False,
                 prompt_lookup: bool = False, draft: bool = False, encoder: str | None = None) -> None:
        self.name, self.pool, self.encoder = name, pool, encoder
        self.numerics, self.speculation = numerics, speculation
        self.want_tokenmap, self.prompt_lookup, self.want_draft = tokenmap, prompt_lookup, draft
        self.engine = None

    def prepare(self, ctx: SetContext) -> None:
        tokenmap = None
        if self.want_tokenmap:
            if ctx.tokenmap is None and self.name == "spec-tokenmap":
                raise Unavailable(ctx.tokenmap_error or f"no token map for set {ctx.name}")
            tokenmap = ctx.tokenmap
        draft = self.pool.config.draft if self.want_draft else None
        if self.want_draft and not draft and self.name == "spec-draft-model":
            raise Unavailable("no draft model given (--draft)")
        try:
            self.engine = self.pool.get(tokenmap=tokenmap, prompt_lookup=self.prompt_lookup, draft_model=draft,
                                        encoder=self.encoder)
        except Unavailable:
            if not self.name.startswith("spec-combined") or not draft:
                raise
            self.engine = self.pool.get(tokenmap=tokenmap, prompt_lookup=self.prompt_lookup,
                                        encoder=self.encoder)  # combined minus draft

    def run(self, clip: Clip, audio: np.ndarray, npy: Path) -> dict:
        eng = self.engine
        assert eng is not None
        res = eng.transcribe(audio, language=clip.language, numerics=self.numerics, speculation=self.speculation,
                             audio_ctx=self.pool.config.audio_ctx, temperature=self.pool.config.temperature)
        eot = eng.tokenizer.special.eot
        timings = dict(res.timings)
        timings["load_s"] = getattr(eng, "load_seconds", timings.get("load_s"))
        return {"text": res.text, "tokens": [t for t in res.tokens if t < eot], "timings": timings,
                "stats": dict(res.stats), "numerics": res.numerics, "windows": len(res.windows),
                "encoder": res.encoder, "audio_ctx": res.audio_ctx,
                # per window, so that a clip decoded in mixed numerics can be checked window by window
                "window_numerics": [w.numerics for w in res.windows],
                "window_reasons": [w.numerics_reason for w in res.windows],  # why each was decoded so
                "window_tokens": [[t for t in w.tokens if t < eot] for w in res.windows],
                "window_seeks": [w.seek for w in res.windows],
                # what the policy expected of each window and what its calls delivered (same units)
                "window_speedup": [[w.numerics, w.stats.get("predicted_speedup"), w.stats.get("realised_speedup")]
                                   for w in res.windows]}


def _windows(mel: np.ndarray):
    """The engine's windowing: fixed 30 s windows over the content frames, zero-padded."""
    from specwhisper.features import N_FRAMES, content_frames, window_features

    n = content_frames(mel)
    for start in range(0, max(n, 1), N_FRAMES):
        yield window_features(mel[:, :min(start + N_FRAMES, n)], start)


def _is_long(mel: np.ndarray) -> bool:
    from specwhisper.features import N_FRAMES, content_frames

    return content_frames(mel) > N_FRAMES


class _Seek:
    """The seek state of ``_seeking_windows``: called with a window's tokens, keeps its complete segments."""

    def __init__(self, prompt: list[int], timestamp_begin: int, eot: int, n_content: int) -> None:
        self.prompt, self.tb, self.eot, self.n = prompt, timestamp_begin, eot, n_content
        self.seek = 0

    def __call__(self, ids: list[int]) -> list[int]:
        from specwhisper.features import N_FRAMES
        from specwhisper.timestamps import split_window

        frames = min(N_FRAMES, self.n - self.seek)
        split = split_window(ids, self.tb, self.eot, self.seek / 100, frames)
        self.seek += split.advance_frames
        return [t for _, _, part, _ in split.segments for t in part]


def _seeking_windows(mel: np.ndarray, tok, language: str):
    """Timestamped windows, each starting where the previous one's last complete segment ended."""
    from specwhisper.features import N_FRAMES, content_frames, window_features

    n = content_frames(mel)
    seek = _Seek(tok.sot_sequence(language, "transcribe", timestamps=True), tok.special.timestamp_begin,
                 tok.special.eot, n)
    while seek.seek < n:
        yield window_features(mel[:, :min(seek.seek + N_FRAMES, n)], seek.seek), seek


def _encode(model, window: np.ndarray):
    import ctranslate2

    return model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(window[None])), to_cpu=False)


class ForkGenerate:
    """The fork's own ``generate`` greedy (beam 1), our features: per 30 s window, or on audio over
    30 s with its own timestamp rules and our seek step (what our engine's default does there)."""

    name = "fork-generate"

    def __init__(self, pool: EnginePool) -> None:
        self.pool = pool

    def prepare(self, ctx: SetContext) -> None:
        self.engine = self.pool.greedy()

    def run(self, clip: Clip, audio: np.ndarray, npy: Path) -> dict:
        from specwhisper.features import log_mel_spectrogram

        eng = self.engine
        model = ct2_model(eng)
        tok = eng.tokenizer
        prompt = tok.sot_sequence(clip.language, "transcribe")
        t0 = time.perf_counter()
        mel = log_mel_spectrogram(audio, n_mels=int(getattr(model, "n_mels", 80)))
        t1 = time.perf_counter()
        enc_s = dec_s = 0.0
        tokens: list[int] = []
        for window, keep in _seeking_windows(mel, tok, clip.language) if _is_long(mel) else (
                (w, None) for w in _windows(mel)):
            ta = time.perf_counter()
            encoded = _encode(model, window)
            tb = time.perf_counter()
            result = ct2_decoder(eng).generate(encoded, [keep.prompt if keep else prompt], beam_size=1,
                                               max_length=448)[0]
            dec_s += time.perf_counter() - tb
            enc_s += tb - ta
            ids = [int(t) for t in result.sequences_ids[0]]
            tokens.extend(keep(ids) if keep else ids)
        total = time.perf_counter() - t0
        text_tokens = [t for t in tokens if t < tok.special.eot]
        return {"text": tok.decode(text_tokens).strip(), "tokens": text_tokens,
                "timings": {"load_s": getattr(eng, "load_seconds", None), "features_s": t1 - t0,
                            "encoder_s": enc_s, "decoder_s": dec_s, "total_s": total},
                "stats": {}, "numerics": None}


class ForkSpeculative:
    """The fork's C++ ``generate_speculative`` loop: a same-model draft, or a small model with id maps."""

    def __init__(self, name: str, pool: EnginePool, *, draft_self: bool) -> None:
        self.name, self.pool, self.draft_self = name, pool, draft_self
        self.draft_model = None
        self.draft_tok = None
        self.maps: tuple[list[int], list[int]] = ([], [])
        self.draft_load_s = 0.0

    def prepare(self, ctx: SetContext) -> None:
        self.engine = self.pool.greedy()
        model = ct2_model(self.engine)
        if not hasattr(model, "generate_speculative"):
            raise Unavailable("this CTranslate2 build has no generate_speculative")
        if self.draft_self or self.draft_model is not None:
            return
        cfg = self.pool.config
        if not cfg.draft:
            raise Unavailable("no draft model given (--draft)")
        import ctranslate2

        from specwhisper.model_store import resolve_model
        from specwhisper.tokenizer import WhisperTokenizer

        draft_dir = resolve_model(cfg.draft)
        if Path(draft_dir).resolve() == Path(self.engine.model_dir).resolve():
            raise Unavailable("the draft is the main model (that is fork-spec-self)")
        t0 = time.perf_counter()
        self.draft_model = ctranslate2.models.Whisper(str(draft_dir), device=cfg.device, compute_type=cfg.compute_type,
                                                      intra_threads=cfg.threads, inter_threads=1)
        self.draft_load_s = time.perf_counter() - t0
        self.draft_tok = WhisperTokenizer.from_model_dir(draft_dir)
        self.maps = vocab_maps(self.engine.tokenizer, self.draft_tok)

    def run(self, clip: Clip, audio: np.ndarray, npy: Path) -> dict:
        from specwhisper.features import log_mel_spectrogram

        eng = self.engine
        model, decoder = ct2_model(eng), ct2_decoder(eng)
        tok = eng.tokenizer
        lm = getattr(eng, "lm", None)
        suppress = list(getattr(lm, "suppress", []) or [])
        if self.draft_model is not None and not getattr(self.draft_model, "is_multilingual", True) \
                and clip.language != "en":
            raise Unavailable(f"English-only draft cannot draft {clip.language}")
        prompt = tok.sot_sequence(clip.language, "transcribe")
        d2m, m2d = self.maps
        k = self.pool.config.spec_k
        t0 = time.perf_counter()
        mel = log_mel_spectrogram(audio, n_mels=int(getattr(model, "n_mels", 80)))
        t1 = time.perf_counter()
        enc_s = dec_s = 0.0
        tokens: list[int] = []
        for i, window in enumerate(_windows(mel)):
            ta = time.perf_counter()
            encoded = _encode(model, window)
            draft = decoder if self.draft_model is None else self.draft_model
            draft_encoded = encoded if self.draft_model is None else _encode(self.draft_model, window)
            tb = time.perf_counter()
            out = decoder.generate_speculative(draft, encoded, draft_encoded, prompt=prompt, num_speculative_tokens=k,
                                               max_length=MAX_NEW_TOKENS, eot_id=tok.special.eot,
                                               suppress_tokens=suppress, d2m=d2m, m2d=m2d,
                                               min_speculative_tokens=1, max_speculative_tokens=2 * k,
                                               reset_adaptive_state=i == 0)
            dec_s += time.perf_counter() - tb
            enc_s += tb - ta
            tokens.extend(int(t) for t in out)
        total = time.perf_counter() - t0
        text_tokens = [t for t in tokens if t < tok.special.eot]
        return {"text": tok.decode(text_tokens).strip(), "tokens": text_tokens,
                "timings": {"load_s": (getattr(eng, "load_seconds", 0.0) or 0.0) + self.draft_load_s,
                            "features_s": t1 - t0, "encoder_s": enc_s, "decoder_s": dec_s, "total_s": total},
                "stats": {}, "numerics": None}


def vocab_maps(main_tok, draft_tok) -> tuple[list[int], list[int]]:
    """(d2m, m2d): id tables between two vocabularies by token text (-1 where the other has none)."""
    def table(src, dst) -> list[int]:
        out = []
        for i in range(src.vocab_size):
            text = src.token_text(i)
            j = dst.token_to_id(text) if text is not None else None
            out.append(int(j) if j is not None and j < dst.vocab_size else -1)
        return out

    return table(draft_tok, main_tok), table(main_tok, draft_tok)


class PeerSystem:
    """A system run by ``peer_worker.py`` in the peer venv (one worker shared by all peer systems)."""

    def __init__(self, name: str, pool: EnginePool, worker_factory: Callable[[], object]) -> None:
        self.name, self.pool, self.worker_factory = name, pool, worker_factory

    def prepare(self, ctx: SetContext) -> None:
        self.worker_factory()  # raises Unavailable when the peer venv cannot be made
        self.tok = self.pool.greedy().tokenizer

    def run(self, clip: Clip, audio: np.ndarray, npy: Path) -> dict:
        cfg = self.pool.config
        model_dir = str(self.pool.greedy().model_dir)
        job = {"op": "transcribe", "system": self.name, "model": model_dir, "device": cfg.device,
               "compute_type": cfg.compute_type, "threads": cfg.threads, "npy": str(npy),
               "language": clip.language, "prompt": self.tok.sot_sequence(clip.language, "transcribe")}
        (res,) = self.worker_factory().run_all(job)  # the factory restarts a worker that died
        eot = self.tok.special.eot
        return {"text": res["text"], "tokens": [t for t in res["tokens"] if t < eot], "timings": res["timings"],
                "stats": {}, "numerics": None, "rss_mb": res.get("rss_mb"),
                "peak_rss_mb": res.get("peak_rss_mb")}


def build_systems(names: list[str], pool: EnginePool, worker_factory: Callable[[], object]) -> list:
    """System objects for the requested names, in the order given."""
    out = []
    for name in names:
        if name == "greedy-single-row":
            out.append(EngineSystem(name, pool, numerics="single-row", speculation=False))
        elif name == "greedy-batch-invariant":
            out.append(EngineSystem(name, pool, numerics="batch-invariant", speculation=False))
        elif name == "spec-tokenmap":
            out.append(EngineSystem(name, pool, numerics="batch-invariant", speculation=True, tokenmap=True))
        elif name == "spec-prompt-lookup":
            out.append(EngineSystem(name, pool, numerics="batch-invariant", speculation=True, prompt_lookup=True))
        elif name == "spec-draft-model":
            out.append(EngineSystem(name, pool, numerics="batch-invariant", speculation=True, draft=True))
        elif name in ("spec-combined", "spec-combined-onnx"):
            out.append(EngineSystem(name, pool, numerics="auto", speculation=True, tokenmap=True, prompt_lookup=True,
                                    draft=True, encoder="onnx" if name.endswith("-onnx") else None))
        elif name == "fork-generate":
            out.append(ForkGenerate(pool))
        elif name == "fork-spec-self":
            out.append(ForkSpeculative(name, pool, draft_self=True))
        elif name == "fork-spec-draft":
            out.append(ForkSpeculative(name, pool, draft_self=False))
        elif SYSTEMS.get(name) and SYSTEMS[name].where == "peer":
            out.append(PeerSystem(name, pool, worker_factory))
        else:
            from specwhisper.errors import SpecWhisperError

            raise SpecWhisperError(f"unknown system {name!r}", where="--systems", hint=f"use {', '.join(SYSTEMS)}")
    return out
