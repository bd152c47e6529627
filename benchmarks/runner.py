"""One benchmark run: every system on every clip, interleaved, results written as they come.

Order: for each set, every system warms up once on a short clip (excluded), then for each clip
and each repeat every system runs once, the order rotating so that machine noise hits all alike.
After each clip the JSON and the markdown are rewritten atomically (an interrupted run leaves
complete files for what finished); plots are redrawn at the end of each set.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specwhisper.errors import SpecWhisperError

from .data import SUITES, Clip, half, limit_for, load_set, shared_data_root, subset
from .machine import command_line, machine_info, now_iso, versions
from .metrics import summarise
from .progress import Progress
from .report import write_json, write_markdown
from .systems import (
    REFERENCE_FOR,
    SYSTEMS,
    BenchConfig,
    EnginePool,
    SetContext,
    Unavailable,
    build_systems,
    process_rss,
)
from .tokenmaps import tokenmap_for_set

WARMUP_CLIP = ("real", "jfk")


@dataclass
class RunOptions:
    suite: str = "all"
    model: str = "base"
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    repeat: int = 3
    limit: dict[str, int] = field(default_factory=dict)  # clips per set ("*": every other set)
    half: str | None = None  # "tune" / "validate": a fixed half of every set, by voice (data.half)
    encoder: str = "auto"  # our engine's encoder backend
    audio_ctx: str = "full"  # our engine's encoder window on short clips ("auto": fitted to the clip)
    temperature: str = "0"  # our engine's temperature or ladder (0: greedy only, as fw-greedy)
    out: Path = Path("results")
    threads: int = 2
    decoder_threads: int | None = None  # our engine's (None: measured per machine)
    compute_type: str = "int8"
    device: str = "cpu"
    draft: str | None = "tiny.en"
    spec_k: int = 4
    data: str | None = None
    baseline: str | None = None
    tokenmap_dir: Path | None = None
    warmup: bool = True
    results_md: Path | None = None
    argv: list[str] | None = None


class PeerHandle:
    """Starts the peer worker on first use; remembers why it could not be started."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.worker = None
        self.error: str | None = None
        self.versions: dict = {}

    def __call__(self):
        if self.worker is not None and self.worker.proc.poll() is not None:
            self.worker = None  # it died (the failing clip was recorded): start a fresh one
        if self.worker is not None:
            return self.worker
        if self.error:
            raise Unavailable(self.error)
        try:
            from .peer_env import PeerWorker

            self.worker = PeerWorker(env_threads=self.threads)
            (self.versions,) = self.worker.run_all({"op": "versions"})
        except (SpecWhisperError, OSError, ValueError) as exc:
            self.error = f"peer environment unavailable: {getattr(exc, 'what', None) or exc}"
            raise Unavailable(self.error) from None
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


BASELINE_ORDER = ("fw-greedy", "ct2-greedy", "fork-generate", "greedy-single-row")


def _baselines(names: list[str], requested: str | None) -> tuple[str | None, str | None]:
    if requested:
        if requested not in names:  # its column was a row of dashes
            raise SpecWhisperError(f"the baseline {requested!r} is not among the systems run", where="--baseline",
                                   hint=f"add it to --systems, or pick one of {', '.join(names)}")
        return requested, "greedy-single-row" if "greedy-single-row" in names else None
    for candidate in BASELINE_ORDER:
        if candidate in names:
            return candidate, "greedy-single-row" if "greedy-single-row" in names else None
    return None, None


def _windows(audio: np.ndarray) -> int:
    return max(1, math.ceil((audio.size // 160) / 3000))


def run_one(system, clip: Clip, audio: np.ndarray, npy: Path, repeat: int) -> dict:
    """One timed transcription as a record; failures and skips become records too."""
    record = {"set": clip.set, "clip": clip.id, "system": system.name, "repeat": repeat,
              "duration_s": audio.size / 16000, "language": clip.language, "refs": [clip.text, *clip.text_alt]}
    t0 = time.perf_counter()
    try:
        out = system.run(clip, audio, npy)
    except Unavailable as exc:
        return {**record, "ok": False, "skipped": True, "error": str(exc)}
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # one failing clip is reported, the run goes on
        msg = exc.message() if isinstance(exc, SpecWhisperError) else f"{type(exc).__name__}: {exc}"
        return {**record, "ok": False, "error": msg}
    record["wall_s"] = time.perf_counter() - t0
    rss = process_rss()
    record.update({"ok": True, "text": out["text"], "tokens": out["tokens"], "timings": out["timings"],
                   "stats": out.get("stats", {}), "numerics": out.get("numerics"),
                   "windows": out.get("windows") or _windows(audio),
                   **{k: out[k] for k in ("window_numerics", "window_reasons", "window_tokens", "window_seeks",
                                          "window_speedup", "encoder", "audio_ctx") if k in out},
                   "rss_mb": out.get("rss_mb", rss["rss_mb"]), "peak_rss_mb": out.get("peak_rss_mb", rss["peak_rss_mb"])})
    return record


class Run:
    """State of one run and the files it keeps up to date."""

    def __init__(self, opts: RunOptions) -> None:
        if opts.suite not in SUITES:
            raise SpecWhisperError(f"unknown suite {opts.suite!r}", where="--suite", hint=f"use {', '.join(SUITES)}")
        if opts.repeat < 1:
            raise SpecWhisperError("--repeat must be at least 1", where="--repeat")
        unknown = [s for s in opts.systems if s not in SYSTEMS]
        if unknown:
            raise SpecWhisperError(f"unknown systems {', '.join(unknown)}", where="--systems",
                                   hint=f"use any of {', '.join(SYSTEMS)}")
        self.opts = opts
        self.root = shared_data_root(opts.data)
        baseline, decoder_baseline = _baselines(opts.systems, opts.baseline)
        self.out = Path(opts.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results: dict = {
            "meta": {
                "command": command_line(opts.argv), "started": now_iso(), "status": "running",
                "suite": opts.suite, "systems": list(opts.systems), "repeat": opts.repeat, "limit": opts.limit,
                "half": opts.half, "encoder": opts.encoder, "audio_ctx": opts.audio_ctx,
                "temperature": opts.temperature,
                "config": {"model": opts.model, "compute_type": opts.compute_type, "device": opts.device,
                           "threads": opts.threads, "draft": opts.draft, "fork_spec_k": opts.spec_k},
                "baseline": baseline, "decoder_baseline": decoder_baseline,
                "machine": machine_info(), "versions": versions(), "peer_versions": {},
                "warmup": ("Warm-up excluded: before each set every system ran once on real/jfk, untimed."
                           if opts.warmup else "No warm-up run (--no-warmup): first runs include cold start."),
                "data_root": str(self.root),
            },
            "sets": {}, "records": [], "summary": {},
        }

    # --------------------------------------------------------------------------------------
    def save(self, *, plots: bool = False) -> None:
        meta = self.results["meta"]
        meta["updated"] = now_iso()
        self.results["summary"] = summarise(self.results["records"], reference_for=REFERENCE_FOR,
                                            baseline=meta["baseline"], decoder_baseline=meta["decoder_baseline"])
        write_json(self.out / "bench.json", self.results)
        write_markdown(self.out / "bench.md", self.results)
        if plots:
            try:
                from .plots import plot_all

                plot_all(self.results, self.out)
            except ImportError as exc:
                meta["plots"] = f"not drawn: {exc} (pip install matplotlib)"
            if self.opts.results_md:
                write_markdown(self.opts.results_md, self.results)

    def execute(self, progress_stream=None) -> dict:
        opts = self.opts
        cfg = BenchConfig(model=opts.model, device=opts.device, compute_type=opts.compute_type,
                          threads=opts.threads, decoder_threads=opts.decoder_threads, draft=opts.draft,
                          spec_k=opts.spec_k, encoder=opts.encoder,
                          audio_ctx=opts.audio_ctx, temperature=opts.temperature)
        pool = EnginePool(cfg)
        peer = PeerHandle(opts.threads)
        systems = build_systems(opts.systems, pool, peer)
        plan = {name: subset(half(load_set(name, self.root), opts.half), limit_for(opts.limit, name))
                for name in SUITES[opts.suite]}
        total = sum(len(c) for c in plan.values()) * len(systems) * opts.repeat
        progress = Progress(total, stream=progress_stream or sys.stderr)
        warm_clip = next(c for c in load_set(WARMUP_CLIP[0], self.root) if c.id == WARMUP_CLIP[1])
        status = "complete"
        try:
            with tempfile.TemporaryDirectory(prefix="sw-bench-") as tmp:
                warm_audio, warm_npy = _audio(warm_clip, Path(tmp), "warmup.npy")
                for set_name, clips in plan.items():
                    self._run_set(set_name, clips, systems, pool, peer, Path(tmp), warm_clip, warm_audio, warm_npy,
                                  progress)
                    self.save(plots=True)
        except KeyboardInterrupt:
            status = "interrupted"
            progress.note("[bench] interrupted: writing what finished")
        finally:
            progress.close()
            peer.close()
            self.results["meta"]["status"] = status
            self.results["meta"]["finished"] = now_iso()
            self.results["meta"]["peer_versions"] = {f"peer {k}": v for k, v in peer.versions.items()}
            self.save(plots=True)
        return self.results

    def _run_set(self, set_name: str, clips: list[Clip], systems: list, pool: EnginePool, peer: PeerHandle,
                 tmp: Path, warm_clip: Clip, warm_audio: np.ndarray, warm_npy: Path, progress: Progress) -> None:
        opts = self.opts
        info = {"n_clips": len(clips), "clips": [c.rel for c in clips], "audio_s": 0.0, "unavailable": {},
                "failures": []}
        self.results["sets"][set_name] = info
        tokenmap, why = None, None
        if any(getattr(s, "want_tokenmap", False) for s in systems):
            try:
                tokenizer = pool.greedy().tokenizer
                tokenmap, why = tokenmap_for_set(set_name, self.root, tokenizer, self.out / "tokenmaps",
                                                 opts.tokenmap_dir)
            except SpecWhisperError as exc:
                why = exc.message()
        info["tokenmap"] = str(tokenmap) if tokenmap else None
        pool.keep_tokenmap(tokenmap)
        ctx = SetContext(set_name, tokenmap=tokenmap, tokenmap_error=why)
        active = []
        for system in systems:
            try:
                system.prepare(ctx)
                active.append(system)
            except (Unavailable, SpecWhisperError) as exc:
                reason = exc.message() if isinstance(exc, SpecWhisperError) else str(exc)
                info["unavailable"][system.name] = reason
                progress.note(f"[bench] {set_name}: {system.name} not run: {reason}")
        skipped = len(systems) - len(active)
        if skipped:
            progress.advance(skipped * len(clips) * opts.repeat)
        if opts.warmup:
            for system in active:
                progress.show(f"{set_name} warm-up {system.name}")
                run_one(system, warm_clip, warm_audio, warm_npy, -1)
        multilingual = getattr(pool.greedy().tokenizer, "multilingual", True) if active else True
        for index, clip in enumerate(clips):
            try:
                audio, npy = _audio(clip, tmp)
            except SpecWhisperError as exc:
                info["failures"].append({"system": "*", "clip": clip.id, "repeat": None, "error": exc.message()})
                progress.note(f"[bench] {set_name}/{clip.id}: cannot load audio: {exc.message()}")
                progress.advance(len(active) * opts.repeat)
                continue
            info["audio_s"] += audio.size / 16000
            for rep in range(opts.repeat):
                shift = (index + rep) % max(len(active), 1)
                for system in active[shift:] + active[:shift]:
                    progress.show(f"{set_name} {clip.id} {system.name} #{rep + 1}")
                    if not multilingual and clip.language != "en":
                        record = {"set": set_name, "clip": clip.id, "system": system.name, "repeat": rep,
                                  "ok": False, "skipped": True, "error": f"English-only model, clip is {clip.language}"}
                    else:
                        record = run_one(system, clip, audio, npy, rep)
                    self.results["records"].append(record)
                    if not record["ok"] and not record.get("skipped"):
                        info["failures"].append({"system": system.name, "clip": clip.id, "repeat": rep,
                                                 "error": record["error"]})
                        progress.note(f"[bench] {set_name}/{clip.id} {system.name}: FAILED: {record['error']}")
                    progress.advance(1, f"{set_name} {clip.id} {system.name} #{rep + 1}")
            self.save()
            npy.unlink(missing_ok=True)


def _audio(clip: Clip, tmp: Path, name: str | None = None) -> tuple[np.ndarray, Path]:
    """The clip decoded once, by our loader; peers get the very same samples as .npy."""
    from specwhisper.audio import load_audio

    audio = load_audio(clip.path)
    npy = tmp / (name or f"{clip.set}_{clip.id}.npy")
    np.save(npy, audio)
    return audio, npy


def run(opts: RunOptions) -> dict:
    return Run(opts).execute()
