"""Token-map drafting on domain speech (issue 8): held-out commands, a repeated-command stream, a sweep.

    python -m benchmarks.command_stream --out results/stream                 # held-out + stream
    python -m benchmarks.command_stream --out results/stream --parts heldout --limit 30
    python -m benchmarks.command_stream --out results/stream --parts stream --stream-len 300
    python -m benchmarks.command_stream --out results/stream --parts sweep   # or add --sweep

Parts (each writes its own JSON in ``--out``; the markdown and plot are rebuilt from every part
found there, so parts can run separately, each within a few minutes on 2 cores):

* ``heldout``: car and smarthome test clips, maps built from the matching ``train.txt`` (the test
  utterances are never in it). Systems interleaved per clip, order rotated every repeat:
  single-row greedy (the fastest greedy), batch-invariant greedy, token map in batch-invariant
  numerics, token map with ``numerics=auto``. Medians of ``--repeat``. What an engine learns
  across calls (bigram filler, draft-length policy) is restored before every repeat, so repeats
  of a clip never see that clip's own text.
* ``stream``: the 60 car test clips replayed in a seeded Zipf order (``tokenmap_sim.zipf_stream``),
  fed in order to three engines: single-row greedy; ``learn=True`` from an empty map;
  ``learn=True`` on top of the static car map. Nothing is cached between utterances except what
  the engines learn (the encoder runs every time). Speedups per block of ``--block`` utterances,
  and exactness against greedy in the numerics each utterance was decoded in (batch-invariant:
  one no-speculation batch-invariant run per distinct clip; single-row: the greedy engine's run).
* ``sweep``: map context length N and fixed draft length K (every pair, plus the adaptive K) on
  the car held-out clips, and map size / build time from 3k and 30k training lines (30k made by
  ``domain/generate.py --n-train 30000 --n-test 0`` in a temporary folder).

Times: ``decoder`` = the decoder phase, ``timings.decoder_s`` (prefill + every decoder call);
``steps`` = ``stats.steps_s`` (every decoder call after the prefill). Speedups are ratios of sums
against single-row greedy on the same clips in the same run. Ar = accepted / drafted (filler
guesses included, as the engine counts them), Al = accepted drafts per verify call; ``tm Ar``
counts the token map's own drafts only.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specwhisper.errors import SpecWhisperError
from specwhisper.io_utils import atomic_write_bytes, atomic_write_text

from .data import Clip, load_set, shared_data_root, subset, train_text
from .machine import command_line, machine_info, now_iso, versions
from .metrics import wer
from .progress import Progress
from .report import write_json
from .tokenmap_sim import zipf_stream
from .tokenmaps import tokenmap_for_set

HELDOUT_SETS = ("car", "smarthome")
STREAM_SET = "car"
SWEEP_SET = "car"
PARTS = ("heldout", "stream", "sweep")
GREEDY_SR = "greedy-single-row"
GREEDY_BI = "greedy-batch-invariant"
WARMUP = ("real", "ljspeech_LJ002-0020")


# ----------------------------------------------------------------------------------------------
# Engines and one timed call

@dataclass
class Bench:
    """What every part shares: settings, the corpus, engines by drafter configuration."""

    model: str
    compute_type: str
    threads: int
    audio_ctx: str
    root: Path
    out: Path
    engines: dict = field(default_factory=dict)
    audio: dict = field(default_factory=dict)
    device: str = "cpu"

    def engine(self, key: str, *, tokenmap: Path | None = None, learn: bool = False):
        """One engine per ``key``: systems that learn (policy, filler, map) never share one."""
        if key not in self.engines:
            from specwhisper import WhisperEngine

            # One model in memory for every system: separately loaded instances of the same model
            # prefilled 45 vs 58-63 ms in one run here (AMD EPYC, 1-thread decoder), which
            # no drafting explains; shared, each system pays the same calls.
            shared = next(iter(self.engines.values())).lm if self.engines else None
            self.engines[key] = WhisperEngine(self.model, device=self.device, compute_type=self.compute_type,
                                              threads=self.threads,
                                              tokenmap=str(tokenmap) if tokenmap else None, learn=learn,
                                              prompt_lookup=False, loaded=shared)
        return self.engines[key]

    def load(self, clip: Clip) -> np.ndarray:
        if clip.rel not in self.audio:
            from specwhisper.audio import load_audio

            self.audio[clip.rel] = load_audio(clip.path)
        return self.audio[clip.rel]

    def tokenmap(self, set_name: str) -> Path:
        path, why = tokenmap_for_set(set_name, self.root, self.engine("greedy").tokenizer, self.out / "tokenmaps")
        if path is None:
            raise SpecWhisperError(f"no token map for {set_name}: {why}", where="benchmarks.tokenmaps",
                                   hint="check ../shared/data/domain/*/train.txt")
        return path

    def warm(self, engine, speculate: bool = False) -> None:
        """Untimed calls in each numerics (and speculating, where that teaches the engine no text for
        good), then forget what they taught the filler and the policy."""
        clip = next(c for c in load_set(WARMUP[0], self.root) if c.id == WARMUP[1])
        saved = snapshot(engine)
        drafter = engine.tokenmap_drafter
        # a learning map learns from calls without speculation too: not from these
        with drafter.learning_paused() if drafter is not None else contextlib.nullcontext():
            for numerics in ("single-row", "batch-invariant"):
                engine.transcribe(self.load(clip), language="en", numerics=numerics, speculation=False,
                                  audio_ctx=self.audio_ctx)
            if speculate:
                engine.transcribe(self.load(clip), language="en", numerics="batch-invariant", speculation=True,
                                  audio_ctx=self.audio_ctx)
        restore(engine, saved)


@dataclass(frozen=True)
class System:
    name: str
    engine_key: str
    numerics: str
    speculation: bool
    draft_len: int | None = None


def run_system(bench: Bench, system: System, clip: Clip) -> dict:
    """One transcription as a record (decoder-phase times, tokens, stats)."""
    engine = bench.engines[system.engine_key]
    res = engine.transcribe(bench.load(clip), language=clip.language, numerics=system.numerics,
                            speculation=system.speculation, draft_len=system.draft_len, audio_ctx=bench.audio_ctx)
    eot = engine.tokenizer.special.eot
    st = dict(res.stats)
    tm = (st.get("by_drafter") or {}).get("tokenmap", {})
    return {"clip": clip.id, "system": system.name, "text": res.text, "tokens": [t for t in res.tokens if t < eot],
            "numerics": res.numerics, "refs": [clip.text, *clip.text_alt],
            "decoder_s": res.timings["decoder_s"], "steps_s": st.get("steps_s", 0.0),
            "prefill_s": st.get("prefill_s", 0.0), "encoder_s": res.timings["encoder_s"],
            "total_s": res.timings["total_s"], "n_tokens": st.get("tokens", 0), "drafted": st.get("drafted", 0),
            "accepted": st.get("accepted", 0), "verify_calls": st.get("verify_calls", 0),
            "k_sum": st.get("k_sum", 0), "steps": st.get("steps", 0),
            "tm_drafted": tm.get("drafted", 0), "tm_accepted": tm.get("accepted", 0)}


def snapshot(engine) -> tuple:
    """What an engine learns across calls, besides a learning token map: filler bigrams, draft-length policy."""
    return copy.deepcopy((engine.guesser, engine.policy))


def restore(engine, state: tuple) -> None:
    engine.guesser, engine.policy = copy.deepcopy(state)


# ----------------------------------------------------------------------------------------------
# Aggregation (pure functions over records)

def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def per_clip(records: list[dict]) -> dict[tuple[str, str], dict]:
    """(clip, system) -> medians of the timed repeats; counts and tokens of the first repeat."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["clip"], r["system"])].append(r)
    out = {}
    for key, runs in groups.items():
        row = dict(runs[0])
        for k in ("decoder_s", "steps_s", "prefill_s", "encoder_s", "total_s"):
            row[k] = _median([r[k] for r in runs])
        row["deterministic"] = all(r["tokens"] == runs[0]["tokens"] for r in runs)
        row["all_tokens"] = [r["tokens"] for r in runs]
        out[key] = row
    return out


def aggregate(rows: list[dict], base: list[dict]) -> dict:
    """Sums over clips for one system and its speedups against ``base`` (single-row greedy) rows."""
    def total(rs: list[dict], k: str) -> float:
        return sum(r[k] for r in rs)

    drafted, accepted, calls = total(rows, "drafted"), total(rows, "accepted"), total(rows, "verify_calls")
    tm_d, tm_a = total(rows, "tm_drafted"), total(rows, "tm_accepted")
    out = {"clips": len(rows), "tokens": total(rows, "n_tokens"), "decoder_s": total(rows, "decoder_s"),
           "steps_s": total(rows, "steps_s"), "prefill_s": total(rows, "prefill_s"),
           "Ar": accepted / drafted if drafted else None, "Al": accepted / calls if calls else None,
           "tm_Ar": tm_a / tm_d if tm_d else None, "mean_k": total(rows, "k_sum") / calls if calls else None,
           "verify_calls": calls, "numerics": dict(Counter(r["numerics"] for r in rows))}
    out["decoder_ms_per_token"] = 1000 * out["decoder_s"] / out["tokens"] if out["tokens"] else None
    for key, field_ in (("decoder_speedup", "decoder_s"), ("steps_speedup", "steps_s")):
        mine, theirs = total(rows, field_), total(base, field_)
        out[key] = theirs / mine if mine > 0 and theirs > 0 else None
    return out


def identity(rows: list[dict], reference: dict[str, dict[str, list[int]]]) -> tuple[int, int, list[str]]:
    """Clips whose every repeat emitted the reference tokens of the numerics it was decoded in."""
    same, compared, different = 0, 0, []
    for r in rows:
        ref = reference.get(r["numerics"], {}).get(r["clip"])
        if ref is None:
            continue
        compared += 1
        if all(t == ref for t in r.get("all_tokens", [r["tokens"]])):
            same += 1
        else:
            different.append(r["clip"])
    return same, compared, different


def summarise_systems(records: list[dict], systems: list[str]) -> dict[str, dict]:
    """Per system: sums, speedups vs single-row greedy, Ar/Al, WER, identity with greedy."""
    rows = per_clip(records)
    clips = sorted({c for c, _ in rows})
    by_sys = {s: [rows[(c, s)] for c in clips if (c, s) in rows] for s in systems}
    base = by_sys.get(GREEDY_SR, [])
    reference = {"single-row": {r["clip"]: r["tokens"] for r in base},
                 "batch-invariant": {r["clip"]: r["tokens"] for r in by_sys.get(GREEDY_BI, [])}}
    out = {}
    for s in systems:
        rs = by_sys.get(s) or []
        if not rs:
            continue
        row = aggregate(rs, [b for b in base if b["clip"] in {r["clip"] for r in rs}])
        row["wer"] = wer((r["text"], r["refs"], "en") for r in rs)
        if s in (GREEDY_SR, GREEDY_BI):  # no drafts: only constant filler rows, nothing to rate
            row.update({"Ar": None, "Al": None, "tm_Ar": None, "mean_k": None})
        if s != GREEDY_SR:  # batch-invariant greedy itself is compared with single-row greedy
            ref = {"batch-invariant": reference["single-row"]} if s == GREEDY_BI else reference
            same, compared, diff = identity(rs, ref)
            row.update({"identical": same, "identical_of": compared, "different_clips": diff[:20]})
        row["deterministic"] = all(r["deterministic"] for r in rs)
        out[s] = row
    return out


# ----------------------------------------------------------------------------------------------
# Part 1: held-out commands

def heldout_systems() -> list[System]:
    return [System(GREEDY_SR, "greedy", "single-row", False), System(GREEDY_BI, "greedy", "batch-invariant", False),
            System("tokenmap-bi", "tm-bi", "batch-invariant", True), System("tokenmap-auto", "tm-auto", "auto", True)]


def run_interleaved(bench: Bench, clips: list[Clip], systems: list[System], repeat: int, progress: Progress,
                    label: str, primary: dict[str, str], on_clip=None) -> list[dict]:
    """Every system on every clip, interleaved and rotated per repeat.

    What an engine learns is restored before each of its runs on a clip, and afterwards set to
    the state its ``primary`` system left (one pass over the clip), so no run sees its own clip
    through an earlier run of itself or of a sibling system on the same engine.
    """
    records: list[dict] = []
    for index, clip in enumerate(clips):
        keys = sorted({s.engine_key for s in systems})
        start = {k: snapshot(bench.engines[k]) for k in keys}
        after: dict[str, tuple] = {}
        for rep in range(repeat):
            shift = (index + rep) % len(systems)
            for system in systems[shift:] + systems[:shift]:
                engine = bench.engines[system.engine_key]
                restore(engine, start[system.engine_key])
                progress.show(f"{label} {clip.id} {system.name} #{rep + 1}")
                rec = run_system(bench, system, clip)
                rec["repeat"] = rep
                records.append(rec)
                if rep == 0 and primary.get(system.engine_key) == system.name:
                    after[system.engine_key] = snapshot(engine)
                progress.advance(1, f"{label} {clip.id} {system.name} #{rep + 1}")
        for k in keys:
            restore(bench.engines[k], after.get(k, start[k]))
        if on_clip:
            on_clip(records)
    return records


def part_heldout(bench: Bench, sets: list[str], limit: int | None, repeat: int, result: dict,
                 save: Callable[[], None], command: str, carry: dict | None = None) -> None:
    """``carry``: sets of an earlier held-out run in the same folder that this run keeps as they were."""
    systems = heldout_systems()
    # "real@car": the real read-speech clips with the car map, a domain map that does not fit them
    plan = {s: subset(load_set(s.split("@")[0], bench.root), limit) for s in sets}
    progress = Progress(sum(len(c) for c in plan.values()) * len(systems) * repeat)
    result.update({"systems": [s.name for s in systems], "sets": dict(carry or {})})
    bench.engine("greedy")
    bench.warm(bench.engines["greedy"])
    for set_name, clips in plan.items():
        tmap = bench.tokenmap(set_name.split("@")[-1])
        for key in ("tm-bi", "tm-auto"):  # fresh engines per set: a map and what was learned with it
            bench.engines.pop(key, None)
            bench.warm(bench.engine(key, tokenmap=tmap), speculate=True)
        entry = result["sets"][set_name] = {"command": command, "limit": limit, "repeat": repeat, "status": "running",
                                            "tokenmap": str(tmap), "clips": [c.rel for c in clips], "records": []}

        def on_clip(records: list[dict], entry: dict = entry, set_name: str = set_name) -> None:
            entry["records"] = records
            entry["summary"] = summarise_systems(records, [s.name for s in systems])
            save()

        primary = {"greedy": GREEDY_SR, "tm-bi": "tokenmap-bi", "tm-auto": "tokenmap-auto"}
        on_clip(run_interleaved(bench, clips, systems, repeat, progress, set_name, primary, on_clip))
        entry["status"] = "complete"
        save()
    progress.close()


# ----------------------------------------------------------------------------------------------
# Part 2: the repeated-command stream

def part_stream(bench: Bench, length: int, seed: int, s: float, block: int, numerics: str, result: dict,
                save: Callable[[], None]) -> None:
    clips = load_set(STREAM_SET, bench.root)
    order = zipf_stream(len(clips), length, seed, s)
    tmap = bench.tokenmap(STREAM_SET)
    greedy = bench.engine("greedy")
    bench.warm(greedy)
    for key, path in (("learn-empty", None), ("learn-static", tmap)):
        bench.engines.pop(key, None)
        bench.warm(bench.engine(key, tokenmap=path, learn=True))
    systems = [System(GREEDY_SR, "greedy", "single-row", False),
               System("learn-empty", "learn-empty", numerics, True),
               System("learn-static", "learn-static", numerics, True)]
    distinct = sorted(set(order))
    progress = Progress(len(distinct) + length * len(systems))
    oracle: dict[str, list[int]] = {}
    oracle_sys = System(GREEDY_BI, "greedy", "batch-invariant", False)
    for i in distinct:  # the exactness reference: one no-speculation batch-invariant run per distinct clip
        oracle[clips[i].id] = run_system(bench, oracle_sys, clips[i])["tokens"]
        progress.advance(1, f"oracle {clips[i].id}")
    result.update({"set": STREAM_SET, "length": length, "seed": seed, "zipf_s": s, "block": block,
                   "numerics": numerics, "tokenmap": str(tmap), "order": [clips[i].id for i in order],
                   "distinct": len(distinct), "systems": [x.name for x in systems], "records": []})
    for n, i in enumerate(order):
        clip = clips[i]
        shift = n % len(systems)
        batch = []
        for system in systems[shift:] + systems[:shift]:
            progress.show(f"stream {n + 1}/{length} {clip.id} {system.name}")
            rec = run_system(bench, system, clip)
            rec["utterance"] = n
            batch.append(rec)
            progress.advance(1, f"stream {n + 1}/{length} {clip.id} {system.name}")
        greedy_tokens = next(r["tokens"] for r in batch if r["system"] == GREEDY_SR)
        for rec in batch:
            ref = oracle[clip.id] if rec["numerics"] == "batch-invariant" else greedy_tokens
            rec["identical"] = rec["tokens"] == ref
            rec["identical_to"] = "batch-invariant greedy" if rec["numerics"] == "batch-invariant" \
                else "single-row greedy"
        result["records"].extend(sorted(batch, key=lambda r: r["system"]))
        if (n + 1) % 10 == 0 or n + 1 == length:
            result["summary"] = summarise_stream(result)
            save()
    result["oracle_vs_single_row"] = _oracle_vs_sr(result, oracle)
    result["summary"] = summarise_stream(result)
    progress.close()


def _oracle_vs_sr(result: dict, oracle: dict[str, list[int]]) -> dict:
    """How often batch-invariant greedy and single-row greedy agree on the distinct clips."""
    sr = {r["clip"]: r["tokens"] for r in result["records"] if r["system"] == GREEDY_SR}
    same = sum(1 for c, t in sr.items() if oracle.get(c) == t)
    return {"same": same, "of": len(sr)}


def summarise_stream(result: dict) -> dict:
    records = result["records"]
    block = result["block"]
    by_utt: dict[int, dict[str, dict]] = defaultdict(dict)
    for r in records:
        by_utt[r["utterance"]][r["system"]] = r
    done = sorted(u for u, rs in by_utt.items() if all(s in rs for s in result["systems"]))
    seen: set[str] = set()
    first_time = {}
    for u in done:
        clip = by_utt[u][GREEDY_SR]["clip"]
        first_time[u] = clip not in seen
        seen.add(clip)

    def window(utts: list[int]) -> dict:
        base = [by_utt[u][GREEDY_SR] for u in utts]
        row: dict = {"utterances": len(utts), "new_clips": sum(first_time[u] for u in utts)}
        for s in result["systems"]:
            rs = [by_utt[u][s] for u in utts]
            agg = aggregate(rs, base)
            agg["identical"] = sum(1 for r in rs if r.get("identical", True))
            row[s] = agg
        return row

    blocks = [window(done[i:i + block]) for i in range(0, len(done), block)]
    for n, b in enumerate(blocks):
        b["range"] = [n * block + 1, n * block + b["utterances"]]
    return {"utterances": len(done), "overall": window(done) if done else {}, "blocks": blocks}


# ----------------------------------------------------------------------------------------------
# Part 3: the sweep

def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _generate_train(root: Path, n_train: int, tmp: Path, per_seed: int = 15000) -> list[str]:
    """``n_train`` lines from ``domain/generate.py --n-train K --n-test 0`` (text only: no audio is made).

    One seed holds fewer distinct car utterances than 30k (about 29k), so the lines come from
    successive seeds, ``per_seed`` at a time: a larger corpus with some repeats, as real logs have.
    """
    script = root / "domain" / "generate.py"
    if not script.is_file():
        raise SpecWhisperError("the domain generator is missing", where=str(script))
    lines: list[str] = []
    seed = 1
    while len(lines) < n_train:
        out = tmp / f"seed{seed}"
        take = min(per_seed, n_train - len(lines))
        proc = subprocess.run([sys.executable, str(script), "--n-train", str(take), "--n-test", "0", "--seed",
                               str(seed), "--domains", SWEEP_SET, "--out", str(out)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SpecWhisperError("domain/generate.py failed", where=str(script), hint=proc.stderr.strip()[-400:])
        lines += _lines(out / SWEEP_SET / "train.txt")
        seed += 1
    return lines[:n_train]


def map_builds(bench: Bench, ns: list[int], big: int) -> tuple[list[dict], dict[int, Path]]:
    """Size and build time of maps from the shared train.txt (3k lines) and ``big`` generated lines."""
    from specwhisper.tokenmap import build_token_map

    tokenizer = bench.engine("greedy").tokenizer
    tokenizer.fingerprint()  # hashed once, outside the timed builds
    source = train_text(SWEEP_SET, bench.root)
    assert source is not None
    rows, paths = [], {}
    with tempfile.TemporaryDirectory(prefix="sw-train-") as tmp:
        inputs = [("train.txt", _lines(source))]
        if big:
            inputs.append((f"generated {big}", _generate_train(bench.root, big, Path(tmp))))
        for label, lines in inputs:
            for n in ns:
                t0 = time.perf_counter()
                tmap = build_token_map(lines, tokenizer, n=n)
                build_s = time.perf_counter() - t0
                st = tmap.stats()
                rows.append({"input": label, "lines": len(lines), "distinct": len(set(lines)), "n": n,
                             "build_s": build_s, "bytes": st["bytes"], "nodes": st["nodes"], "tokens": st["tokens"]})
                if label == "train.txt":
                    paths[n] = tmap.save(bench.out / "tokenmaps" / f"{SWEEP_SET}-n{n}.tmap")
    return rows, paths


def part_sweep(bench: Bench, limit: int | None, repeat: int, ns: list[int], ks: list[int], big: int, result: dict,
               save: Callable[[], None]) -> None:
    builds, paths = map_builds(bench, ns, big)
    result.update({"set": SWEEP_SET, "limit": limit, "repeat": repeat, "ns": ns, "ks": ks, "builds": builds})
    save()
    clips = subset(load_set(SWEEP_SET, bench.root), limit)
    systems = [System(GREEDY_SR, "greedy", "single-row", False), System(GREEDY_BI, "greedy", "batch-invariant", False)]
    bench.warm(bench.engine("greedy"))
    for n in ns:
        key = f"tm-n{n}"
        bench.engines.pop(key, None)
        bench.warm(bench.engine(key, tokenmap=paths[n]), speculate=True)
        systems.append(System(f"n{n}-kauto", key, "batch-invariant", True))
        systems += [System(f"n{n}-k{k}", key, "batch-invariant", True, draft_len=k) for k in ks]
    result["systems"] = [s.name for s in systems]
    result["clips"] = [c.rel for c in clips]
    progress = Progress(len(clips) * len(systems) * repeat)
    primary = {"greedy": GREEDY_SR, **{f"tm-n{n}": f"n{n}-kauto" for n in ns}}

    def on_clip(records: list[dict]) -> None:
        result["records"] = records
        result["summary"] = summarise_systems(records, result["systems"])
        save()

    on_clip(run_interleaved(bench, clips, systems, repeat, progress, "sweep", primary, on_clip))
    progress.close()


# ----------------------------------------------------------------------------------------------
# Report

def _f(value, spec: str, scale: float = 1.0) -> str:
    return "–" if value is None else format(value * scale, spec)


def _numerics(counts: dict) -> str:
    short = {"single-row": "SR", "batch-invariant": "BI"}
    return ", ".join(f"{short.get(k, k)} {v}" for k, v in sorted(counts.items()))


def markdown(parts: dict) -> str:
    lines = ["# Token map on domain speech: held-out commands, a repeated-command stream, a sweep", ""]
    for name in PARTS:
        if name not in parts:
            continue
        meta = parts[name]["meta"]
        lines += [f"Part `{name}`: `{meta['command']}` ({meta['status']}, {meta.get('updated', '')}); "
                  f"{meta['machine'].get('cpu')}, {meta['machine'].get('cores_usable')} usable cores, "
                  f"{meta['config']['model']} {meta['config']['compute_type']}, {meta['config']['threads']} threads, "
                  f"audio_ctx {meta['config']['audio_ctx']}.  "]
    lines += ["", "`decoder` = prefill + every decoder call (timings.decoder_s); `steps` = every decoder call after "
              "the prefill (stats.steps_s). Speedups: sums against single-row greedy on the same clips, same run. "
              "Ar = accepted / drafted (filler guesses included), Al = accepted per verify call, tm Ar = the token "
              "map's own drafts. `= greedy`: tokens identical to no-speculation greedy in the numerics the clip "
              "was decoded in (every repeat).", ""]
    if "heldout" in parts:
        h = parts["heldout"]["heldout"]
        lines += ["## Held-out commands", "", "Systems interleaved per clip, medians of the repeats. Made by:", ""]
        lines += [f"* {k}: `{e.get('command')}` ({e.get('status')}, {len(e.get('clips', []))} clips, "
                  f"{e.get('repeat')} repeats)" for k, e in h.get("sets", {}).items()]
        lines.append("")
        head = ("| set | system | clips | numerics | WER % | decoder s | steps s | dec ms/tok | decoder speedup | "
                "steps speedup | Ar | Al | tm Ar | mean K | = greedy |")
        lines += [head, "|" + "---|" * 15]
        for set_name, entry in h["sets"].items():
            for s, row in (entry.get("summary") or {}).items():
                ident = f"{row['identical']}/{row['identical_of']}" if "identical" in row else "(ref)"
                lines.append(
                    f"| {set_name} | {s} | {row['clips']} | {_numerics(row['numerics'])} | {_f(row['wer'], '.1f', 100)} "
                    f"| {row['decoder_s']:.2f} | {row['steps_s']:.2f} | {_f(row['decoder_ms_per_token'], '.1f')} "
                    f"| {_f(row['decoder_speedup'], '.2f')} | {_f(row['steps_speedup'], '.2f')} | {_f(row['Ar'], '.2f')} "
                    f"| {_f(row['Al'], '.2f')} | {_f(row['tm_Ar'], '.2f')} | {_f(row['mean_k'], '.1f')} | {ident} |")
        lines.append("")
    if "stream" in parts:
        st = parts["stream"]["stream"]
        summ = st.get("summary") or {}
        lines += ["## Repeated-command stream", "",
                  f"{st['length']} utterances of the {st['distinct']} distinct {st['set']} clips drawn in a Zipf order "
                  f"(s={st['zipf_s']}, seed {st['seed']}); learners decode with numerics={st['numerics']}. "
                  f"Decoder-phase speedup vs single-row greedy per block of {st['block']} utterances "
                  "(`new` = utterances whose clip was heard for the first time).", ""]
        lines += ["| utterances | new | learn-empty speedup | Ar | Al | numerics | = greedy | learn-static speedup | Ar | "
                  "Al | numerics | = greedy |", "|" + "---|" * 12]
        rows = summ.get("blocks", []) + ([dict(summ["overall"], range=["all", ""])] if summ.get("overall") else [])
        for b in rows:
            cells = []
            for s in ("learn-empty", "learn-static"):
                a = b[s]
                cells += [_f(a["decoder_speedup"], ".2f"), _f(a["Ar"], ".2f"), _f(a["Al"], ".2f"),
                          _numerics(a["numerics"]), f"{a['identical']}/{a['clips']}"]
            rng = "all" if b["range"][0] == "all" else f"{b['range'][0]}-{b['range'][1]}"
            lines.append(f"| {rng} | {b['new_clips']} | " + " | ".join(cells) + " |")
        o = st.get("oracle_vs_single_row")
        if o:
            lines += ["", f"Batch-invariant greedy = single-row greedy on {o['same']}/{o['of']} distinct clips."]
        if summ.get("overall"):
            ov = summ["overall"]
            lines += ["", "Steps-only speedup overall: " + ", ".join(
                f"{s} {_f(ov[s]['steps_speedup'], '.2f')}" for s in ("learn-empty", "learn-static")) + "."]
        lines.append("")
    if "sweep" in parts:
        sw = parts["sweep"]["sweep"]
        lines += ["## Sweep: context length N, draft length K", "",
                  f"{sw['set']} held-out clips (limit {sw['limit']}), {sw['repeat']} repeat(s), batch-invariant "
                  "numerics; decoder-phase speedup vs single-row greedy (steps-only in brackets).", ""]
        summ = sw.get("summary") or {}
        ks = ["auto", *map(str, sw["ks"])]
        lines += ["| N | " + " | ".join(f"K={k}" for k in ks) + " | = greedy |", "|" + "---|" * (len(ks) + 2)]
        for n in sw["ns"]:
            cells, same, of = [], 0, 0
            for k in ks:
                row = summ.get(f"n{n}-k{k}")
                cells.append("–" if not row else f"{_f(row['decoder_speedup'], '.2f')} ({_f(row['steps_speedup'], '.2f')})")
                if row:
                    same += row.get("identical", 0)
                    of += row.get("identical_of", 0)
            lines.append(f"| {n} | " + " | ".join(cells) + f" | {same}/{of} |")
        bi = summ.get(GREEDY_BI)
        if bi:
            lines += ["", f"Batch-invariant greedy (no speculation): {_f(bi['decoder_speedup'], '.2f')}x "
                      f"(= single-row on {bi['identical']}/{bi['identical_of']} clips)."]
        lines += ["", "Map builds (default builder settings but N; build time includes tokenising):", "",
                  "| input | lines (distinct) | N | build s | size KiB | nodes |", "|---|---|---|---|---|---|"]
        for b in sw["builds"]:
            lines.append(f"| {b['input']} | {b['lines']} ({b.get('distinct', '?')}) | {b['n']} | {b['build_s']:.2f} | "
                         f"{b['bytes'] / 1024:.0f} | {b['nodes']} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(parts: dict, path: Path) -> Path | None:
    """Decoder-phase speedup per block of the stream, one line per learning engine."""
    stream = parts.get("stream", {}).get("stream", {})
    blocks = (stream.get("summary") or {}).get("blocks") or []
    if not blocks:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [b["range"][1] for b in blocks]
    for s in ("learn-empty", "learn-static"):
        ax.plot(xs, [b[s]["decoder_speedup"] or 0.0 for b in blocks], marker="o", label=s)
    ax.axhline(1.0, color="black", linewidth=0.8, label="single-row greedy")
    ax.set_xlabel(f"utterances heard (blocks of {stream['block']})")
    ax.set_ylabel("decoder-phase speedup vs single-row greedy")
    ax.set_title(f"Repeated {stream['set']} commands, Zipf s={stream['zipf_s']}: speedup as the engine learns")
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def write_reports(out: Path) -> None:
    import json

    parts = {}
    for name in PARTS:
        p = out / f"{name}.json"
        if p.is_file():
            parts[name] = json.loads(p.read_text(encoding="utf-8"))
    atomic_write_text(out / "command_stream.md", markdown(parts))
    plot(parts, out / "stream_blocks.png")


# ----------------------------------------------------------------------------------------------

def _int_list(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of integers") from None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.command_stream",
                                 description="token-map drafting on domain speech: held-out, stream, sweep")
    ap.add_argument("--out", type=Path, default=Path("results/stream"))
    ap.add_argument("--parts", default="heldout,stream", help=f"comma-separated of {', '.join(PARTS)}")
    ap.add_argument("--sweep", action="store_true", help="also run the sweep part")
    ap.add_argument("--limit", type=int, default=None, help="held-out clips per set (default all 60)")
    ap.add_argument("--heldout-sets", default=",".join(HELDOUT_SETS),
                    help="held-out sets to run now (SET@MAPSET: clips of SET with the map of MAPSET, e.g. real@car); "
                         "other sets already in --out/heldout.json are kept")
    ap.add_argument("--repeat", type=int, default=3, help="held-out repeats (medians)")
    ap.add_argument("--stream-len", type=int, default=300)
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--stream-numerics", default="auto", choices=("auto", "batch-invariant"),
                    help="numerics of the learning engines (default auto: what a user gets)")
    ap.add_argument("--sweep-limit", type=int, default=20)
    ap.add_argument("--sweep-repeat", type=int, default=1)
    ap.add_argument("--sweep-n", type=_int_list, default=[2, 3, 4])
    ap.add_argument("--sweep-k", type=_int_list, default=[1, 2, 4, 8, 12, 16])
    ap.add_argument("--big-train", type=int, default=30000, help="generated training lines for the size row (0: skip)")
    ap.add_argument("--model", default="base")
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--audio-ctx", default="full", help="encoder context for every system (default full)")
    ap.add_argument("--data", default=None, help="shared corpus root (default ../shared/data)")
    return ap


def run(args: argparse.Namespace, argv: list[str]) -> None:
    parts = [p.strip() for p in args.parts.split(",") if p.strip()] + (["sweep"] if args.sweep else [])
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise SpecWhisperError(f"unknown parts {', '.join(unknown)}", where="--parts", hint=f"use {', '.join(PARTS)}")
    if args.repeat < 1 or args.sweep_repeat < 1 or args.block < 1 or args.stream_len < 1:
        raise SpecWhisperError("--repeat, --sweep-repeat, --block and --stream-len must be at least 1",
                               where="command_stream")
    if any(not 1 <= k <= 16 for k in args.sweep_k):
        raise SpecWhisperError("--sweep-k values must be within 1..16", where="--sweep-k")
    sets = [x.strip() for x in args.heldout_sets.split(",") if x.strip()]

    def known(spec: str) -> bool:  # "car", or "real@car": any shared set with a domain set's map
        clips_set, _, map_set = spec.partition("@")
        return (map_set or clips_set) in HELDOUT_SETS and bool(clips_set)

    if not sets or not all(known(x) for x in sets):
        raise SpecWhisperError(f"unknown held-out sets {args.heldout_sets!r}", where="--heldout-sets",
                               hint=f"use a comma-separated subset of {', '.join(HELDOUT_SETS)}, or "
                                    "SET@MAPSET (e.g. real@car)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.model, args.compute_type, args.threads, args.audio_ctx, shared_data_root(args.data), out,
                  device=args.device)
    command = "python -m benchmarks.command_stream " + command_line(argv)[len("python -m benchmarks "):]
    for name in dict.fromkeys(parts):
        doc: dict = {"meta": {"command": command, "part": name, "started": now_iso(), "status": "running",
                              "config": {"model": args.model, "compute_type": args.compute_type,
                                         "threads": args.threads, "audio_ctx": args.audio_ctx},
                              "machine": machine_info(), "versions": versions(), "data_root": str(bench.root)}}

        section: dict = {}
        doc[name] = section  # each part fills its section in place; save() rewrites the files

        def save(doc: dict = doc, name: str = name) -> None:
            doc["meta"]["updated"] = now_iso()
            doc["meta"]["engines"] = engine_settings(bench.engines)
            write_json(out / f"{name}.json", doc)
            write_reports(out)

        try:
            if name == "heldout":
                part_heldout(bench, sets, args.limit, args.repeat, section, save, command,
                             _carry(out / "heldout.json", sets, doc["meta"]["config"]))
            elif name == "stream":
                part_stream(bench, args.stream_len, args.seed, args.zipf_s, args.block, args.stream_numerics,
                            section, save)
            else:
                part_sweep(bench, args.sweep_limit, args.sweep_repeat, args.sweep_n, args.sweep_k, args.big_train,
                           section, save)
            doc["meta"]["status"] = "complete"
        except KeyboardInterrupt:
            doc["meta"]["status"] = "interrupted"
            save()
            raise
        finally:
            doc["meta"]["finished"] = now_iso()
            save()


def engine_settings(engines: dict) -> dict:
    """What each engine's policy priced calls with (``benchmarks.draft_replay`` replays with it):
    an engine whose cost measurement found the machine busy runs on the default curve."""
    from specwhisper.measure_cache import kernel_env

    return {key: {"row_floor": e.row_floor, "row_ceiling": e.row_ceiling, "kernel_env": kernel_env(),
                  "cost": {str(k): v for k, v in e.verify_cost.by_rows.items()}} for key, e in engines.items()}


def _carry(path: Path, rerun: list[str], config: dict) -> dict:
    """Held-out sets of an earlier run in the same folder (same model and settings) not rerun now."""
    import json

    if not path.is_file():
        return {}
    try:
        prev = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if prev.get("meta", {}).get("config") != config:
        return {}
    return {k: v for k, v in (prev.get("heldout") or {}).get("sets", {}).items() if k not in rerun}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        run(args, argv)
    except SpecWhisperError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("[stream] interrupted: wrote what finished", file=sys.stderr)
        return 130
    print(f"[stream] wrote {args.out}/command_stream.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
