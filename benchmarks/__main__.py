"""``python -m benchmarks run|verify-cost|report|fixtures`` (from the repo root)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specwhisper.encoders import ENCODERS
from specwhisper.errors import SpecWhisperError

from .data import HALVES, SUITES, parse_limits
from .systems import SYSTEMS

# Everything but fork-spec-draft (the fork's loop with a second model: slow on CPU, see README).
QUICK_SYSTEMS = [name for name in SYSTEMS if name != "fork-spec-draft"]


def _systems(value: str) -> list[str]:
    if value == "all":
        return list(SYSTEMS)
    if value == "default":
        return list(QUICK_SYSTEMS)
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown systems {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description="specwhisper benchmark suite")
    sub = ap.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run systems side by side on the shared clip sets")
    r.add_argument("--suite", choices=list(SUITES), default="all")
    r.add_argument("--model", default="base", help="model name or CT2 directory (default base)")
    r.add_argument("--systems", type=_systems, default=list(QUICK_SYSTEMS),
                   help="comma-separated, 'default' or 'all'. Known: " + ", ".join(SYSTEMS))
    r.add_argument("--repeat", type=int, default=3, help="timed repeats per clip and system (medians reported)")
    r.add_argument("--limit", action="append", default=None, metavar="N|SET=N",
                   help="at most N clips per set, spread over the manifest; repeat with SET=N for one set "
                        "(e.g. --limit 4 --limit longform=1)")
    r.add_argument("--half", choices=HALVES, default=None,
                   help="a fixed half of every set by voice: tune on one, report on the other (default: all)")
    r.add_argument("--encoder", default="auto", choices=ENCODERS, help="our engine's encoder")
    r.add_argument("--audio-ctx", default="full", help="our engine's encoder window on short clips (full, auto, N)")
    r.add_argument("--temperature", default="0", help="our engine's temperature or fallback ladder "
                   "(default 0: greedy only, as fw-greedy; the engine's own default is 0,0.2,...,1)")
    r.add_argument("--out", type=Path, default=Path("results"))
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--decoder-threads", type=int, default=None,
                   help="our engine's decoder threads (default: measured per machine, as the engine does)")
    r.add_argument("--compute-type", default="int8")
    r.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    r.add_argument("--draft", default="tiny.en", help="draft model for spec-draft-model / fork-spec-draft ('' = none)")
    r.add_argument("--spec-k", type=int, default=4, help="K for the fork's generate_speculative (adaptive 1..2K)")
    r.add_argument("--baseline", default=None, help="system the e2e speedup is measured against (default: the first "
                   "of fw-greedy, ct2-greedy, fork-generate, greedy-single-row that runs)")
    r.add_argument("--tokenmap-dir", type=Path, default=None, help="prebuilt <set>.tmap files (default: build them)")
    r.add_argument("--data", default=None, help="shared corpus root (default ../shared/data)")
    r.add_argument("--no-warmup", action="store_true", help="do not run the untimed warm-up per system and set")
    r.add_argument("--results-md", type=Path, default=None,
                   help="also write the markdown here (benchmarks/RESULTS.md keeps the latest numbers)")

    v = sub.add_parser("verify-cost", help="time one n-row verify call vs n single steps, n = 1..max")
    v.add_argument("--model", default="base")
    v.add_argument("--compute-type", default="int8")
    v.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    v.add_argument("--threads", type=int, default=2)
    v.add_argument("--max-n", type=int, default=17, help="largest call measured (17 = K 16 plus the last token)")
    v.add_argument("--trials", type=int, default=15)
    v.add_argument("--position", type=int, default=24, help="decoder position (tokens already in the cache)")
    v.add_argument("--api", choices=("greedy", "logits"), default="greedy",
                   help="greedy: forward_*_greedy as the engine uses; logits: forward_batch/forward_step")
    v.add_argument("--out", type=Path, default=Path("results") / "verify-cost")
    v.add_argument("--output", type=Path, default=None, help="JSON path (default OUT/verify_cost_<...>.json)")

    p = sub.add_parser("report", help="rebuild bench.md and the plots from a bench.json")
    p.add_argument("json", type=Path)
    p.add_argument("--out", type=Path, default=None)

    sub.add_parser("fixtures", help="write the faster-whisper oracle fixtures into tests/fixtures "
                                    "(options: python -m benchmarks fixtures --help)")
    return ap


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from .runner import RunOptions, run

    opts = RunOptions(suite=args.suite, model=args.model, systems=args.systems, repeat=args.repeat,
                      limit=parse_limits(args.limit), half=args.half, encoder=args.encoder,
                      audio_ctx=args.audio_ctx, temperature=args.temperature,
                      out=args.out, threads=args.threads, decoder_threads=args.decoder_threads,
                      compute_type=args.compute_type, device=args.device,
                      draft=args.draft or None, spec_k=args.spec_k, data=args.data, baseline=args.baseline,
                      tokenmap_dir=args.tokenmap_dir, warmup=not args.no_warmup, results_md=args.results_md,
                      argv=argv)
    results = run(opts)
    print(f"[bench] {results['meta']['status']}: {args.out / 'bench.json'}, {args.out / 'bench.md'}, plots in "
          f"{args.out}", file=sys.stderr)
    return 0 if results["meta"]["status"] == "complete" else 130


def cmd_verify_cost(args: argparse.Namespace, argv: list[str]) -> int:
    from .machine import command_line, machine_info, now_iso
    from .report import write_json
    from .verify_cost import default_path, measure

    if args.threads < 1 or args.max_n < 1 or args.trials < 1:
        raise SpecWhisperError("--threads, --max-n and --trials must be positive", where="verify-cost")

    def tick(trial: int, trials: int) -> None:
        print(f"\r[verify-cost] trial {trial}/{trials}", end="", file=sys.stderr, flush=True)

    curve = measure(args.model, args.compute_type, args.device, args.threads, max_n=args.max_n, trials=args.trials,
                    position=args.position, api=args.api, progress=tick)
    print(file=sys.stderr)
    curve.update({"machine": machine_info(), "command": command_line(argv), "created": now_iso()})
    path = args.output or default_path(args.out, curve)
    write_json(path, curve)
    try:
        from .plots import plot_verify_cost

        plot_verify_cost(curve, path.with_suffix(".png"))
    except ImportError:
        print("[verify-cost] matplotlib missing: no plot", file=sys.stderr)
    rel = ", ".join(f"{n}:{curve['batch_ms'][n] / curve['step_ms']:.2f}" for n in curve["batch_ms"])
    print(f"[verify-cost] step {curve['step_ms']:.2f} ms; batched/step by n: {rel}", file=sys.stderr)
    print(path)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .metrics import summarise
    from .plots import plot_all
    from .report import write_json, write_markdown
    from .systems import REFERENCE_FOR

    try:
        results = json.loads(args.json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecWhisperError(f"cannot read the results: {getattr(exc, 'strerror', None) or exc}", where=str(args.json),
                               hint="pass the bench.json a run wrote (python -m benchmarks run ... --out DIR)") from None
    meta = results.get("meta", {})
    results["summary"] = summarise(results.get("records", []), reference_for=REFERENCE_FOR,
                                   baseline=meta.get("baseline"), decoder_baseline=meta.get("decoder_baseline"))
    out = args.out or args.json.parent
    write_json(out / "bench.json", results)
    write_markdown(out / "bench.md", results)
    plot_all(results, out)
    print(out / "bench.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fixtures"]:  # its own parser takes the rest (argparse REMAINDER drops leading options)
        from .make_oracle_fixtures import main as fixtures_main

        return fixtures_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "verify-cost":
            return cmd_verify_cost(args, argv)
        return cmd_report(args)
    except SpecWhisperError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
