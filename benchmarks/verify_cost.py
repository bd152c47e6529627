"""Verify-cost probe: one batched decoder call of n rows vs n single-row steps, n = 1..max_n.

This curve is the physical limit of speculative speedups (a verify call that accepts a tokens
saves a steps but costs ``batch_ms[n] / step_ms`` steps), and the engine's cost model loads it
(``specwhisper.policy.VerifyCost.from_file``). The state is rolled back with
``truncate_to_step`` between trials, never cloned, exactly as the verifier does.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from specwhisper.errors import SpecWhisperError

CONTEXT_TEXT = (" And so my fellow Americans, ask not what your country can do for you, ask what you can do for "
                "your country. Mister Quilter is the apostle of the middle classes, and we are glad to welcome "
                "his gospel.")


def load_curve(path: str | Path) -> dict:
    """Read and check a verify-cost JSON (the form the engine loads)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecWhisperError(f"cannot read verify-cost file: {exc}", where=str(path),
                               hint="regenerate it with: python -m benchmarks verify-cost") from None
    missing = [k for k in ("model", "compute_type", "device", "threads", "step_ms", "batch_ms") if k not in data]
    if missing:
        raise SpecWhisperError(f"verify-cost file lacks {', '.join(missing)}", where=str(path),
                               hint="regenerate it with: python -m benchmarks verify-cost")
    if not isinstance(data["batch_ms"], dict) or not data["batch_ms"] or float(data["step_ms"]) <= 0:
        raise SpecWhisperError("verify-cost file has no usable timings", where=str(path),
                               hint="regenerate it with: python -m benchmarks verify-cost")
    try:
        data["batch_ms"] = {str(int(n)): float(ms) for n, ms in data["batch_ms"].items()}
    except (TypeError, ValueError):
        raise SpecWhisperError("verify-cost batch_ms must map row counts to milliseconds", where=str(path),
                               hint="regenerate it with: python -m benchmarks verify-cost") from None
    return data


def relative_cost(curve: dict) -> dict[int, float]:
    """Cost of an n-row call in single steps (1 row = 1.0), as the engine's cost model uses it."""
    step = float(curve["step_ms"])
    table = {1: 1.0}
    table.update({int(n): float(ms) / step for n, ms in curve["batch_ms"].items() if int(n) >= 2})
    return dict(sorted(table.items()))


def measure(model: str, compute_type: str = "int8", device: str = "cpu", threads: int = 2, max_n: int = 17,
            trials: int = 15, position: int = 24, api: str = "greedy", seed: int = 0,
            progress=None) -> dict:
    """Median ms of one n-row ``forward_batch`` and of n ``forward_step`` calls, at decoder position ``position``."""
    import ctranslate2

    from specwhisper.audio import load_audio
    from specwhisper.features import log_mel_spectrogram, window_features
    from specwhisper.model_store import resolve_model
    from specwhisper.tokenizer import WhisperTokenizer

    model_dir = resolve_model(model)
    tok = WhisperTokenizer.from_model_dir(model_dir)
    t0 = time.perf_counter()
    wm = ctranslate2.models.Whisper(str(model_dir), device=device, compute_type=compute_type, intra_threads=threads,
                                    inter_threads=1)
    load_s = time.perf_counter() - t0
    if not hasattr(wm, "forward_batch"):
        raise SpecWhisperError("this CTranslate2 build has no step API (forward_batch/forward_step)",
                               where="ctranslate2", hint="install ctranslate2-crisperwhisper (the fork)")
    sample = Path(__import__("specwhisper").__file__).with_name("samples") / "morning.flac"
    audio = load_audio(sample) if sample.is_file() else np.zeros(16000 * 5, np.float32)
    mel = window_features(log_mel_spectrogram(audio, n_mels=int(getattr(wm, "n_mels", 80))), 0)
    encoded = wm.encode(ctranslate2.StorageView.from_array(mel[None]), to_cpu=False)
    text = tok.encode(CONTEXT_TEXT)
    while len(text) < position + max_n + 1:
        text = text + text
    state, _ = wm.prefill(encoded, tok.sot_sequence("en") + text[:position])
    base = state.current_step
    rows = text[position:position + max_n]
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    suppress = sorted({int(i) for i in config.get("suppress_ids", [])})  # as the engine's greedy calls pass them

    if api == "greedy":
        def batch(tokens: list[int]) -> object:
            return wm.forward_batch_greedy(state, tokens, suppress)

        def step(token: int) -> object:
            return wm.forward_step_greedy(state, token, suppress)
    elif api == "logits":
        def batch(tokens: list[int]) -> object:
            return np.asarray(wm.forward_batch(state, tokens)).argmax(-1)

        def step(token: int) -> object:
            return np.asarray(wm.forward_step(state, token)).argmax(-1)
    else:
        raise SpecWhisperError(f"unknown api {api!r}", where="--api", hint="use greedy or logits")

    ns = list(range(1, max_n + 1))
    batch_t: dict[int, list[float]] = {n: [] for n in ns}
    steps_t: dict[int, list[float]] = {n: [] for n in ns}
    single: list[float] = []
    first = None
    rollback_ok = True
    rng = random.Random(seed)
    for trial in range(trials + 1):  # trial 0 warms up and is dropped
        order = ns[:]
        rng.shuffle(order)
        for n in order:
            t = time.perf_counter()
            out = batch(rows[:n])
            dt = time.perf_counter() - t
            state.truncate_to_step(base)
            if n == 1:
                pred = np.asarray(out).reshape(-1)[0]
                first = pred if first is None else first
                rollback_ok &= bool(pred == first)
            t = time.perf_counter()
            for i in range(n):
                t_one = time.perf_counter()
                step(rows[i])
                if i == 0 and trial:
                    single.append(time.perf_counter() - t_one)
            ds = time.perf_counter() - t
            state.truncate_to_step(base)
            if trial:
                batch_t[n].append(dt)
                steps_t[n].append(ds)
        if progress:
            progress(trial, trials)
    step_ms = 1000 * statistics.median(single)
    batch_ms = {str(n): round(1000 * statistics.median(batch_t[n]), 4) for n in ns}
    return {
        "model": Path(model_dir).name if Path(model).exists() else model,
        "compute_type": compute_type, "device": device, "threads": threads,
        "step_ms": round(step_ms, 4), "batch_ms": batch_ms,
        "steps_ms": {str(n): round(1000 * statistics.median(steps_t[n]), 4) for n in ns},
        "relative": {str(n): round(c, 4) for n, c in relative_cost({"step_ms": step_ms, "batch_ms": batch_ms}).items()},
        "position": position, "trials": trials, "api": api, "rollback_deterministic": rollback_ok,
        "model_load_s": round(load_s, 3), "ctranslate2": getattr(ctranslate2, "__version__", "?"),
        "note": "batch_ms[n]: median ms of one n-row forward_batch call; steps_ms[n]: n forward_step calls; "
                "step_ms: median of one forward_step. Rolled back with truncate_to_step between trials.",
    }


def default_path(out: Path, curve: dict) -> Path:
    return out / f"verify_cost_{curve['model']}_{curve['compute_type']}_{curve['device']}_t{curve['threads']}.json"
