"""``specwhisper batch``: many files into an output folder, here or on a Ray cluster (issue 22)."""

from __future__ import annotations

import argparse
import sys

from .cores import usable_cores


def add_batch_parser(sub, add_model_args, add_decoding_args) -> None:
    b = sub.add_parser(
        "batch", help="transcribe folders, globs or manifests into an output folder (resumable; Ray optional)",
        description="Transcribe many files. Outputs are written atomically, one set per input, and recorded: "
                    "a rerun skips inputs whose outputs are there and verify. Without --ray the files run on "
                    "this machine (--workers N: a process pool); with it, on a Ray cluster (the [ray] extra). "
                    "Text is the same either way.")
    b.add_argument("inputs", nargs="+", help="audio files, folders (searched recursively), globs, or a .jsonl "
                                             "(objects with path, optional name) / .csv (header: path[,name]) manifest")
    b.add_argument("-o", "--output-dir", required=True, help="where outputs go (on a cluster: storage every node "
                                                       "writes to)")
    b.add_argument("-f", "--output-format", default="json",
                   help="comma-separated: txt, json (default), srt, vtt, parquet (one dataset: "
                        "DIR/transcripts.parquet/)")
    b.add_argument("--ray", default=None, metavar="ADDRESS|auto|local",
                   help="run on Ray: a cluster's address, auto (the cluster this machine is in) or local (start "
                        "one here)")
    b.add_argument("--workers", type=int, default=1,
                   help="engines working at once (default 1: sequential, in this process)")
    b.add_argument("--threads-per-worker", type=int, default=None, dest="threads_per_worker",
                   help="CPU threads of each worker's engine (default: this machine's cores shared among "
                        "--workers here, --threads on Ray)")
    b.add_argument("--piece-s", type=float, default=None, dest="piece_s", metavar="S",
                   help="cut files longer than 1.5 x S seconds at silences into pieces that workers decode "
                        "independently, stitched back with their times (default: whole files)")
    b.add_argument("--retries", type=int, default=2,
                   help="how often a failed input is tried again (a dead worker, a passing error; default 2)")
    add_model_args(b)
    add_decoding_args(b)


def run_batch_command(args: argparse.Namespace) -> int:
    from .batch import run_batch

    if args.threads_per_worker is not None:
        args.threads = args.threads_per_worker
    elif args.workers > 1 and args.ray is None:  # this machine's cores shared out among the pool
        args.threads = max(1, usable_cores() // args.workers)
    # case as typed does not matter, and a format named twice is written once
    formats = tuple(dict.fromkeys(fmt.strip().lower() for fmt in args.output_format.split(",") if fmt.strip()))
    report = run_batch(args.inputs, args.output_dir, args, formats=formats, ray=args.ray, workers=args.workers,
                       retries=args.retries, stream=sys.stderr)
    if report.progress is not None:
        print(report.progress.summary(), file=sys.stderr)
    if (decided := report.decisions) is not None:
        print(f"decoded in {decided.numerics} numerics ({decided.why}), encoder {decided.encoder}, settled once for "
              "every input", file=sys.stderr)
    done = sum(o.status != "failed" for o in report.outcomes)
    print(f"files: {done} of {len(report.outcomes)} transcribed or already there, {len(report.failed)} failed",
          file=sys.stderr)
    for outcome in report.failed:
        print(f"failed: {outcome.path}: {outcome.error}", file=sys.stderr)
    return 1 if report.failed else 0
