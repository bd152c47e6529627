"""Draft-length policies side by side: our cost model vs fixed K and the +2/-1 heuristic.

    python -m benchmarks.studies.k_policy --out results/k_policy

Same clips, same drafters, batch-invariant numerics, interleaved per clip. Besides wall-clock
decoder time it reports the *modelled* decoder cost: every decoder call priced by the engine's
measured call-cost curve (1-row step = 1.0), which does not move with machine noise. Tokens must
equal the no-speculation run for every policy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.data import load_set, shared_data_root, subset
from benchmarks.tokenmaps import tokenmap_for_set
from specwhisper import WhisperEngine
from specwhisper.io_utils import atomic_write_text
from specwhisper.policy import AdaptiveDraftLength, StepHeuristicDraftLength

POLICIES = ("cost-model", "fixed-2", "fixed-4", "fixed-8", "heuristic+2/-1")


def _engine_for(policy: str, base: WhisperEngine) -> tuple[WhisperEngine, dict]:
    """The engine set up for ``policy`` (filler guesses learn per call only, so no policy inherits
    another's pass over the same clip)."""
    if policy == "cost-model":
        base.policy = AdaptiveDraftLength(base.verify_cost, row_floor=base.row_floor or 2,
                                          k_max=max(1, base.row_ceiling - 1), prior=0.7, prior_coverage=0.8)
        return base, {}
    if policy.startswith("fixed-"):
        return base, {"draft_len": int(policy.split("-")[1])}
    base.policy = StepHeuristicDraftLength(k=4, k_max=max(1, base.row_ceiling - 1))
    return base, {}


def modelled_cost(stats: dict, cost) -> float:
    """Decoder calls priced by the call-cost curve (prefill excluded): what the policy controls."""
    return stats["steps"] + sum(n * cost(int(rows)) for rows, n in stats["calls_by_rows"].items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.k_policy", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=12)
    p.add_argument("--out", default="results/k_policy")
    args = p.parse_args(argv)
    root = shared_data_root()
    plain = WhisperEngine(args.model, threads=args.threads, prompt_lookup=False)
    cases = []
    for set_name in ("car", "smarthome"):
        maps = Path(args.out) / "maps"
        maps.mkdir(parents=True, exist_ok=True)
        tmap, why = tokenmap_for_set(set_name, root, plain.tokenizer, maps)
        if tmap is None:
            print(f"{set_name}: no token map ({why})", file=sys.stderr)
        engine = WhisperEngine(args.model, threads=args.threads, tokenmap=tmap, prompt_lookup=True)
        cases.append((set_name, engine, subset(load_set(set_name, root), args.limit)))
    engine = WhisperEngine(args.model, threads=args.threads, prompt_lookup=True)
    cases.append(("longform", engine, load_set("longform", root)))
    report: dict = {"command": " ".join(sys.argv), "results": {}}
    for set_name, engine, clips in cases:
        totals = {name: {"tokens": 0, "calls": 0, "cost": 0.0, "decoder_s": 0.0, "exact": 0} for name in POLICIES}
        greedy_s = greedy_tokens = 0.0
        for clip in clips:
            ref = plain.transcribe(clip.path, language="en", numerics="batch-invariant", speculation=False)
            sr = plain.transcribe(clip.path, language="en", numerics="single-row", speculation=False)
            greedy_s += sr.timings["decoder_s"] - sr.timings["prefill_s"]
            greedy_tokens += sr.stats["tokens"]
            for name in POLICIES:
                eng, extra = _engine_for(name, engine)
                r = eng.transcribe(clip.path, language="en", numerics="batch-invariant", **extra)
                t = totals[name]
                t["tokens"] += r.stats["tokens"]
                t["calls"] += r.stats["verify_calls"]
                t["cost"] += modelled_cost(r.stats, eng.verify_cost)
                t["decoder_s"] += r.timings["decoder_s"] - r.timings["prefill_s"]
                t["exact"] += r.tokens == ref.tokens
            print(f"{set_name} {clip.rel}", file=sys.stderr)
        for t in totals.values():
            t["modelled_speedup"] = t["tokens"] / t["cost"] if t["cost"] else 0.0  # single-row: 1 step per token
            t["wall_speedup"] = greedy_s / t["decoder_s"] if t["decoder_s"] else 0.0
            t["clips"] = len(clips)
        report["results"][set_name] = {"greedy_steps_s": greedy_s, "greedy_tokens": greedy_tokens, "policies": totals}
        atomic_write_text(Path(args.out) / "k_policy.json", json.dumps(report, indent=1))
    lines = [f"Command: `{report['command']}`", "",
             "| set | policy | clips exact | tokens/call | modelled speedup | wall steps speedup |", "|---|---|---|---|---|---|"]
    for set_name, res in report["results"].items():
        for name, t in res["policies"].items():
            lines.append(f"| {set_name} | {name} | {t['exact']}/{t['clips']} | {t['tokens'] / max(t['calls'], 1):.2f} | "
                         f"{t['modelled_speedup']:.2f}x | {t['wall_speedup']:.2f}x |")
    atomic_write_text(Path(args.out) / "k_policy.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
