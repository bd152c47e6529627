"""Short encoder context (issue 7): what ``--audio-ctx`` costs in WER and gains in time, per clip set.

    python -m benchmarks.audio_ctx_bench --out results/audio_ctx [--limit 12] [--repeat 3] \
        [--margins 100,200,400] [--sizes 600,1000,1500]

Sets: the domain test sets (smarthome, car: commands), ``real`` (the human sentence clips of
real/), ``digits`` (the spoken-digit clips of real/), ``read`` (read speech shorter than 20 s).
Systems, interleaved per clip (order rotated every repeat): base greedy single-row, speculation
off, with ``audio_ctx`` = full, auto (once per ``--margins`` value, patching
``specwhisper.audio_ctx.AUTO_MARGIN_FRAMES`` at run time) and each pinned size (a clip longer
than a pinned size decodes in the full window: counted as a fallback), plus faster-whisper
greedy in the peer environment (``benchmarks/peer_env.py``) on the very same samples.

Reported per set and system: WER and its change vs full, the share of clips whose text changes
vs full, encoder / decoder / end-to-end time (medians of repeats, summed over clips), decoder ms
per token (the decoder's cross-attention shrinks with the context too), speedups vs full and vs
faster-whisper, and which sizes ``auto`` picked. The margin recommendation applies the goal of
issue 7: WER within ``--max-wer-delta`` points of full on the domain and real sets while cutting
end-to-end time on commands (smarthome + car) at least ``--min-speedup`` times.

Writes ``audio_ctx.json``, ``audio_ctx.md`` and ``audio_ctx.png`` (all atomically) to ``--out``;
the JSON and markdown are rewritten after every clip, so an interrupted run leaves what finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from specwhisper.errors import SpecWhisperError
from specwhisper.io_utils import atomic_write_bytes, atomic_write_text

from .data import Clip, load_set, shared_data_root, subset
from .machine import command_line, machine_info, now_iso, versions
from .metrics import clip_errors, clip_medians, normalise, sign_test, wer
from .progress import Progress
from .report import write_json
from .runner import PeerHandle, _audio, run_one
from .systems import BenchConfig, EnginePool, PeerSystem, SetContext, Unavailable

SET_ORDER = ("smarthome", "car", "real", "digits", "read")
COMMAND_SETS = ("smarthome", "car")
ACCURACY_SETS = ("smarthome", "car", "real", "digits")  # "domain and real sets" of the issue
READ_MAX_S = 20.0
FULL = "full"
PEER = "fw-greedy"
WARMUP = ("real", "ljspeech_LJ002-0020")  # 1.5 s: every short size holds it, so each size's self-test runs


def ctx_sets(root: Path, limit: int | None) -> dict[str, list[Clip]]:
    """The clip sets of this benchmark, each a spread subset of ``limit`` clips."""
    real = load_set("real", root)
    sets = {
        "smarthome": load_set("smarthome", root),
        "car": load_set("car", root),
        "real": [c for c in real if c.kind == "sentence"],
        "digits": [dataclasses.replace(c, set="digits") for c in real if c.kind != "sentence"],
        "read": [c for c in load_set("read", root) if 0 < c.duration_s < READ_MAX_S],
    }
    return {name: subset(clips, limit) for name, clips in sets.items()}


class CtxSystem:
    """Our engine, greedy single-row, no speculation, with one ``audio_ctx`` (and auto margin)."""

    def __init__(self, name: str, pool: EnginePool, audio_ctx: str | int, margin: int | None = None) -> None:
        self.name, self.pool, self.audio_ctx, self.margin = name, pool, audio_ctx, margin
        self.engine = None
        self.last_frames: int | None = None

    def prepare(self, ctx: SetContext) -> None:
        self.engine = self.pool.greedy()

    def run(self, clip: Clip, audio, npy: Path) -> dict:
        import specwhisper.audio_ctx as audio_ctx_module

        eng = self.engine
        assert eng is not None
        saved = audio_ctx_module.AUTO_MARGIN_FRAMES
        if self.margin is not None:
            audio_ctx_module.AUTO_MARGIN_FRAMES = self.margin
        try:
            res = eng.transcribe(audio, language=clip.language, numerics="single-row", speculation=False,
                                 audio_ctx=self.audio_ctx)
        finally:
            audio_ctx_module.AUTO_MARGIN_FRAMES = saved
        self.last_frames = int(res.audio_ctx)
        eot = eng.tokenizer.special.eot
        timings = dict(res.timings)
        timings["load_s"] = eng.load_seconds
        return {"text": res.text, "tokens": [t for t in res.tokens if t < eot], "timings": timings,
                "stats": dict(res.stats), "numerics": res.numerics, "windows": len(res.windows)}


def build_systems(pool: EnginePool, peer: PeerHandle, margins: list[int], sizes: list[int],
                  with_peer: bool) -> list:
    systems: list = [CtxSystem(FULL, pool, "full")]
    systems += [CtxSystem(f"auto@{m}", pool, "auto", margin=m) for m in margins]
    systems += [CtxSystem(str(s), pool, s) for s in sizes]
    if with_peer:
        systems.append(PeerSystem(PEER, pool, peer))
    return systems


# ----------------------------------------------------------------------------------------------
# Summary: pure functions over the records, so the tables can be rebuilt from the JSON.

def _sum(rows: list[dict], key: str) -> float:
    return sum((r["timings"].get(key) or 0.0) for r in rows)


def _group_summary(rows_by_system: dict[str, dict[str, dict]], frames: dict[tuple[str, str], int],
                   clips: list[str], requested: dict[str, int | None]) -> dict[str, dict]:
    """One row per system over ``clips`` (the clips every system finished)."""
    full = rows_by_system.get(FULL, {})
    peer = rows_by_system.get(PEER, {})
    out: dict[str, dict] = {}
    for system, rows in rows_by_system.items():
        ok = [rows[c] for c in clips if c in rows]
        if not ok:
            continue
        row: dict = {"clips": len(ok)}
        row["wer"] = wer((r["text"] or "", r.get("refs") or [""], r.get("language") or "en") for r in ok)
        row["encoder_s"] = _sum(ok, "encoder_s")
        row["decoder_s"] = _sum(ok, "decoder_s")
        row["total_s"] = _sum(ok, "total_s")
        row["audio_s"] = sum(r.get("duration_s") or 0.0 for r in ok)
        tokens = sum((r.get("stats") or {}).get("tokens") or len(r.get("tokens") or []) + 1 for r in ok)
        row["tokens"] = tokens
        row["decoder_ms_per_token"] = 1000 * row["decoder_s"] / tokens if tokens else None
        if system != PEER:
            used = [frames.get((r["key"], system)) for r in ok]
            row["sizes"] = dict(sorted(Counter(str(f) for f in used if f is not None).items()))
            size = requested.get(system)
            if size is not None:
                row["fallback"] = sum(1 for f in used if f is not None and f != size)
        if full:
            base = [full[c] for c in clips if c in full and c in rows]
            mine = [rows[c] for c in clips if c in full and c in rows]
            row["changed"] = sum(1 for a, b in zip(mine, base) if (a["text"] or "").strip() != (b["text"] or "").strip())
            row["changed_words"] = sum(1 for a, b in zip(mine, base)
                                       if normalise(a["text"] or "", a.get("language") or "en")
                                       != normalise(b["text"] or "", b.get("language") or "en"))
            row["changed_share"] = row["changed"] / len(mine) if mine else None
            errs = [(clip_errors(a["text"] or "", a.get("refs") or [""], a.get("language") or "en")[0],
                     clip_errors(b["text"] or "", b.get("refs") or [""], b.get("language") or "en")[0])
                    for a, b in zip(mine, base)]
            row["better"], row["worse"] = sum(m < f for m, f in errs), sum(m > f for m, f in errs)
            row["sign_p"] = sign_test(row["better"], row["worse"])
            full_wer = wer((r["text"] or "", r.get("refs") or [""], r.get("language") or "en") for r in base)
            row["wer_delta_pp"] = (100 * (row["wer"] - full_wer)) if row["wer"] is not None and full_wer is not None \
                else None
            row["speedup_vs_full"] = _ratio(_sum(base, "total_s"), _sum(mine, "total_s"))
            row["encoder_speedup_vs_full"] = _ratio(_sum(base, "encoder_s"), _sum(mine, "encoder_s"))
            row["decoder_step_ratio_vs_full"] = None
            base_tokens = sum((r.get("stats") or {}).get("tokens") or 0 for r in base)
            if tokens and base_tokens and _sum(base, "decoder_s") > 0 and system != PEER:
                row["decoder_step_ratio_vs_full"] = (row["decoder_s"] / tokens) / (_sum(base, "decoder_s") / base_tokens)
        if peer:
            pairs = [(rows[c], peer[c]) for c in clips if c in peer and c in rows]
            row["speedup_vs_fw"] = _ratio(sum(p["timings"]["total_s"] or 0.0 for _, p in pairs),
                                          sum(m["timings"]["total_s"] or 0.0 for m, _ in pairs))
        out[system] = row
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if a > 0 and b > 0 else None


def summarise(results: dict) -> dict:
    """Per set and pooled groups ("commands", "all"): one row per system."""
    records = results["records"]
    systems = results["meta"]["systems"]
    requested = results["meta"]["requested_frames"]
    frames = {(f"{r['set']}/{r['clip']}", r["system"]): r["audio_ctx"] for r in records
              if r.get("ok") and r.get("audio_ctx")}
    rows = clip_medians(records)
    by_set: dict[str, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for (set_name, clip, system), row in rows.items():
        if row.get("ok"):
            by_set[set_name][system][f"{set_name}/{clip}"] = {**row, "key": f"{set_name}/{clip}"}

    def complete(set_names: tuple[str, ...]) -> tuple[dict[str, dict[str, dict]], list[str]]:
        merged: dict[str, dict[str, dict]] = defaultdict(dict)
        for s in set_names:
            for system, clips in by_set.get(s, {}).items():
                merged[system].update(clips)
        clip_ids = sorted(set.intersection(*(set(merged[s]) for s in systems if s in merged)) if merged else set())
        return merged, clip_ids

    summary: dict[str, dict] = {}
    groups = [(s, (s,)) for s in SET_ORDER if s in by_set]
    groups += [("commands", COMMAND_SETS), ("all", tuple(s for s in SET_ORDER if s in by_set))]
    for label, members in groups:
        merged, clip_ids = complete(members)
        if clip_ids:
            summary[label] = {"members": list(members),
                              "systems": _group_summary(merged, frames, clip_ids, requested)}
    return summary


def recommend_margin(summary: dict, margins: list[int], max_wer_delta: float, min_speedup: float) -> dict:
    """Which auto margin meets the goal: WER within ``max_wer_delta`` points of full on the
    accuracy sets and end-to-end speedup on commands of at least ``min_speedup``."""
    verdicts = []
    for m in margins:
        name = f"auto@{m}"
        deltas = {s: summary[s]["systems"].get(name, {}).get("wer_delta_pp") for s in ACCURACY_SETS if s in summary}
        speed = summary.get("commands", {}).get("systems", {}).get(name, {}).get("speedup_vs_full")
        wer_ok = all(d is not None and d <= max_wer_delta for d in deltas.values()) and bool(deltas)
        speed_ok = speed is not None and speed >= min_speedup
        verdicts.append({"margin": m, "wer_delta_pp": deltas, "commands_speedup": speed, "wer_ok": wer_ok,
                         "speed_ok": speed_ok, "meets_goal": wer_ok and speed_ok})
    meeting = [v for v in verdicts if v["meets_goal"]]
    # Among margins that meet the goal, the widest: it keeps the most trailing context (the safest
    # for accuracy) while still being fast enough.
    best = max(meeting, key=lambda v: v["margin"]) if meeting else None
    return {"rule": f"WER delta <= {max_wer_delta} pp on {', '.join(ACCURACY_SETS)} and commands e2e speedup "
                    f">= {min_speedup}x vs full; widest margin that meets both",
            "verdicts": verdicts, "recommended": best["margin"] if best else None}


# ----------------------------------------------------------------------------------------------
# Report

def _f(value, spec: str, scale: float = 1.0) -> str:
    return "–" if value is None else format(value * scale, spec)


def markdown(results: dict) -> str:
    meta = results["meta"]
    summary = results.get("summary", {})
    lines = ["# Short encoder context (`--audio-ctx`): accuracy vs time", "",
             f"Command: `{meta['command']}`  ", f"Status: {meta['status']}, {meta.get('updated', '')}  ",
             f"Machine: {meta['machine'].get('cpu')}, {meta['machine'].get('cores_usable')} usable cores; "
             f"model {meta['config']['model']} {meta['config']['compute_type']}, {meta['config']['threads']} threads; "
             f"our systems greedy single-row, speculation off; {meta['repeat']} repeats, medians, systems interleaved "
             "per clip; warm-up excluded.", "",
             "Times are sums over the set's clips of per-clip medians. `dec ms/tok` = decoder s (prefill + all "
             "decoder calls) / tokens; `step ratio` = that per-token cost relative to full. `changed` = clips "
             "whose text differs from full (in brackets: still differs after Whisper's normaliser); "
             "`better / worse` = clips with fewer / more word errors than full, `p` the two-sided sign test "
             "of that split (small: a real difference; near 1: what chance gives). `sizes` = the "
             "encoder frames actually used (3000 = full window); "
             "`fallback` = clips a pinned size could not hold (decoded in full).", ""]
    head = ("| system | clips | WER % | ΔWER pp | changed | better / worse (p) | sizes (fallback) | enc s | dec s | "
            "dec ms/tok | step ratio | e2e s | e2e ×full | e2e ×fw |")
    for label, group in summary.items():
        lines += [f"## {label} ({', '.join(group['members'])})", "", head, "|" + "---|" * 14]
        for system in meta["systems"]:
            row = group["systems"].get(system)
            if not row:
                continue
            sizes = ", ".join(f"{k}:{v}" for k, v in (row.get("sizes") or {}).items())
            if row.get("fallback") is not None:
                sizes += f" ({row['fallback']})"
            changed = "–" if row.get("changed") is None else \
                f"{row['changed']}/{row['clips']} ({row.get('changed_words', 0)})"
            paired = "–" if row.get("better") is None or system == FULL else \
                f"{row['better']} / {row['worse']} ({row['sign_p']:.2f})"
            lines.append(
                f"| {system} | {row['clips']} | {_f(row.get('wer'), '.1f', 100)} | {_f(row.get('wer_delta_pp'), '+.1f')} "
                f"| {changed} | {paired} | {sizes or '–'} | {_f(row.get('encoder_s'), '.2f')} | {_f(row.get('decoder_s'), '.2f')} "
                f"| {_f(row.get('decoder_ms_per_token'), '.1f')} | {_f(row.get('decoder_step_ratio_vs_full'), '.2f')} "
                f"| {_f(row.get('total_s'), '.2f')} | {_f(row.get('speedup_vs_full'), '.2f')} "
                f"| {_f(row.get('speedup_vs_fw'), '.2f')} |")
        lines.append("")
    rec = results.get("recommendation")
    if rec:
        lines += ["## Auto margin", "", f"Rule: {rec['rule']}.", "",
                  "| margin (frames) | ΔWER pp per set | commands e2e ×full | WER ok | speed ok |", "|---|---|---|---|---|"]
        for v in rec["verdicts"]:
            deltas = ", ".join(f"{s} {_f(d, '+.1f')}" for s, d in v["wer_delta_pp"].items())
            lines.append(f"| {v['margin']} | {deltas} | {_f(v['commands_speedup'], '.2f')} | "
                         f"{'yes' if v['wer_ok'] else 'no'} | {'yes' if v['speed_ok'] else 'no'} |")
        lines += ["", f"Recommended margin: **{rec['recommended'] if rec['recommended'] is not None else 'none meets the goal'}**"
                  f" (engine default at run time: {meta.get('default_margin')}).", ""]
    unavailable = meta.get("unavailable")
    if unavailable:
        lines += ["Not run: " + "; ".join(f"{k}: {v}" for k, v in unavailable.items()), ""]
    if meta.get("peer_versions"):
        lines += ["Peer: " + ", ".join(f"{k} {v}" for k, v in meta["peer_versions"].items()), ""]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path | None:
    """WER change vs end-to-end speedup (both against full), one point per set and context size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    summary = results.get("summary", {})
    systems = [s for s in results["meta"]["systems"] if s not in (FULL, PEER)]
    fig, ax = plt.subplots(figsize=(8, 5))
    markers = "osD^v<>"
    for i, set_name in enumerate([s for s in SET_ORDER if s in summary] + (["commands"] if "commands" in summary else [])):
        rows = summary[set_name]["systems"]
        pts = [(rows[s].get("speedup_vs_full"), rows[s].get("wer_delta_pp"), s) for s in systems if s in rows]
        pts = [p for p in pts if p[0] is not None and p[1] is not None]
        if not pts:
            continue
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)], s=40,
                   label=set_name, alpha=0.8)
        for x, y, s in pts:
            ax.annotate(s, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    goal = results.get("recommendation", {})
    ax.axhline(0.0, color="black", linewidth=0.6)
    if goal:
        ax.axhline(results["meta"]["max_wer_delta"], color="gray", linestyle="--", linewidth=0.8,
                   label=f"+{results['meta']['max_wer_delta']} pp")
        ax.axvline(results["meta"]["min_speedup"], color="gray", linestyle=":", linewidth=0.8,
                   label=f"{results['meta']['min_speedup']}x")
    ax.set_yscale("symlog", linthresh=2.0)  # decoding loops add hundreds of points; keep small deltas readable
    ax.set_xlabel("end-to-end speedup vs full 30 s context")
    ax.set_ylabel("WER change vs full (percentage points, symlog)")
    ax.set_title(f"--audio-ctx: WER change vs speedup ({results['meta']['config']['model']} "
                 f"{results['meta']['config']['compute_type']}, {results['meta']['config']['threads']} threads)")
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def save(results: dict, out: Path, *, final: bool = False) -> None:
    meta = results["meta"]
    meta["updated"] = now_iso()
    results["summary"] = summarise(results)
    results["recommendation"] = recommend_margin(results["summary"], meta["margins"], meta["max_wer_delta"],
                                                 meta["min_speedup"])
    write_json(out / "audio_ctx.json", results)
    atomic_write_text(out / "audio_ctx.md", markdown(results))
    if final:
        plot(results, out / "audio_ctx.png")


# ----------------------------------------------------------------------------------------------

def _int_list(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of frame counts") from None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.audio_ctx_bench",
                                 description="WER and time of --audio-ctx full|auto|FRAMES per clip set")
    ap.add_argument("--out", type=Path, default=Path("results/audio_ctx"))
    ap.add_argument("--limit", type=int, default=12, help="clips per set, spread over the manifest (default 12)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats per clip and system (medians)")
    ap.add_argument("--margins", type=_int_list, default=[100, 200, 400],
                    help="auto margins to try, frames (patches specwhisper.audio_ctx.AUTO_MARGIN_FRAMES)")
    ap.add_argument("--sizes", type=_int_list, default=[600, 1000, 1500], help="pinned encoder sizes, frames")
    ap.add_argument("--sets", default=",".join(SET_ORDER), help=f"comma-separated subset of {', '.join(SET_ORDER)}")
    ap.add_argument("--model", default="base")
    ap.add_argument("--compute-type", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-peer", action="store_true", help="skip faster-whisper (no peer environment)")
    ap.add_argument("--max-wer-delta", type=float, default=0.5, help="goal: WER points above full at most")
    ap.add_argument("--min-speedup", type=float, default=3.0, help="goal: e2e speedup on commands at least")
    ap.add_argument("--data", default=None, help="shared corpus root (default ../shared/data)")
    ap.add_argument("--report", type=Path, default=None, metavar="DIR",
                    help="only rebuild DIR/audio_ctx.md and .png from DIR/audio_ctx.json (no transcription)")
    return ap


def run(args: argparse.Namespace, argv: list[str] | None) -> dict:
    from specwhisper.audio_ctx import AUTO_MARGIN_FRAMES, SHORT_SIZES, parse_audio_ctx

    for size in args.sizes:
        parse_audio_ctx(size)  # a size the engine does not support fails here, with its message
    if args.repeat < 1:
        raise SpecWhisperError("--repeat must be at least 1", where="--repeat")
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SET_ORDER]
    if unknown:
        raise SpecWhisperError(f"unknown sets {', '.join(unknown)}", where="--sets", hint=f"use {', '.join(SET_ORDER)}")
    root = shared_data_root(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = {k: v for k, v in ctx_sets(root, args.limit).items() if k in wanted}
    pool = EnginePool(BenchConfig(model=args.model, compute_type=args.compute_type, threads=args.threads))
    peer = PeerHandle(args.threads)
    systems = build_systems(pool, peer, args.margins, args.sizes, not args.no_peer)
    results: dict = {"meta": {
        "command": command_line(argv).replace("python -m benchmarks ", "python -m benchmarks.audio_ctx_bench "),
        "started": now_iso(), "status": "running", "repeat": args.repeat, "limit": args.limit,
        "config": {"model": args.model, "compute_type": args.compute_type, "threads": args.threads},
        "systems": [s.name for s in systems], "margins": args.margins, "sizes": args.sizes,
        "engine_short_sizes": list(SHORT_SIZES), "default_margin": AUTO_MARGIN_FRAMES,
        "requested_frames": {s.name: (s.audio_ctx if isinstance(s.audio_ctx, int) else None)
                             for s in systems if isinstance(s, CtxSystem)},
        "max_wer_delta": args.max_wer_delta, "min_speedup": args.min_speedup,
        "machine": machine_info(), "versions": versions(), "data_root": str(root),
        "sets": {k: [c.rel for c in v] for k, v in plan.items()}, "unavailable": {}, "peer_versions": {}},
        "records": []}
    active = []
    for system in systems:
        try:
            system.prepare(SetContext("audio_ctx"))
            active.append(system)
        except (Unavailable, SpecWhisperError) as exc:
            results["meta"]["unavailable"][system.name] = exc.message() if isinstance(exc, SpecWhisperError) else str(exc)
    results["meta"]["systems"] = [s.name for s in active]
    total = sum(len(c) for c in plan.values()) * len(active) * args.repeat
    progress = Progress(total)
    status = "complete"
    try:
        with tempfile.TemporaryDirectory(prefix="sw-audio-ctx-") as tmp:
            warm = next(c for c in load_set(WARMUP[0], root) if c.id == WARMUP[1])
            warm_audio, warm_npy = _audio(warm, Path(tmp), "warmup.npy")
            for system in active:  # untimed: model load, peer start
                progress.show(f"warm-up {system.name}")
                run_one(system, warm, warm_audio, warm_npy, -1)
            for size in SHORT_SIZES:  # every size auto may pick runs its (cached) self-test once, untimed
                pool.greedy().transcribe(warm_audio, language=warm.language, numerics="single-row",
                                         speculation=False, audio_ctx=size)
            for set_name, clips in plan.items():
                for index, clip in enumerate(clips):
                    audio, npy = _audio(clip, Path(tmp))
                    for rep in range(args.repeat):
                        shift = (index + rep) % len(active)
                        for system in active[shift:] + active[:shift]:
                            label = f"{set_name} {clip.id} {system.name} #{rep + 1}"
                            progress.show(label)
                            record = run_one(system, clip, audio, npy, rep)
                            record["set"] = set_name
                            if isinstance(system, CtxSystem) and record.get("ok"):
                                record["audio_ctx"] = system.last_frames
                            if not record.get("ok"):
                                progress.note(f"[audio-ctx] {label}: {record.get('error')}")
                            results["records"].append(record)
                            progress.advance(1, label)
                    npy.unlink(missing_ok=True)
                    save(results, out)
    except KeyboardInterrupt:
        status = "interrupted"
        progress.note("[audio-ctx] interrupted: writing what finished")
    finally:
        progress.close()
        peer.close()
        results["meta"]["status"] = status
        results["meta"]["finished"] = now_iso()
        results["meta"]["peer_versions"] = {f"peer {k}": v for k, v in peer.versions.items()}
        save(results, out, final=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report is not None:
        import json

        source = args.report / "audio_ctx.json"
        if not source.is_file():
            print(f"error: no {source}", file=sys.stderr)
            return 2
        results = json.loads(source.read_text(encoding="utf-8"))
        save(results, args.report, final=True)
        print(f"[audio-ctx] rebuilt {args.report}/audio_ctx.md and .png", file=sys.stderr)
        return 0
    try:
        results = run(args, argv if argv is not None else sys.argv[1:])
    except SpecWhisperError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2
    rec = results.get("recommendation", {})
    print(f"[audio-ctx] wrote {args.out}/audio_ctx.json, .md, .png; recommended auto margin: "
          f"{rec.get('recommended')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

