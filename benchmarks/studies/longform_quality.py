"""Long-form text quality by decoding mode: fixed windows vs timestamps, greedy vs fallback ladder.

    python -m benchmarks.studies.longform_quality [--model base]

Each long-form file is transcribed (single-row numerics, speculation off: text is the point here)
without timestamps, with timestamps, and with timestamps plus the temperature fallback ladder,
each with and without the previous window's text as prompt. Prints WER per file and which
windows fell back to which temperature, as a markdown table.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.data import shared_data_root
from benchmarks.metrics import clip_errors
from specwhisper import WhisperEngine
from specwhisper.fallback import LADDER

MODES = {
    "fixed windows, greedy": dict(timestamps="off"),
    "timestamps, greedy": dict(timestamps="on"),
    "timestamps, fallback ladder": dict(timestamps="on", temperature=LADDER, seed=0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.longform_quality")
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=None)
    args = ap.parse_args(argv)
    root = shared_data_root(args.data) / "longform"
    clips = [json.loads(line) for line in (root / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    engine = WhisperEngine(args.model, threads=args.threads, prompt_lookup=False)
    print("| file | mode | previous text as prompt | WER % | windows | fell back (window: temperature) |")
    print("|---|---|---|---:|---:|---|")
    for clip in clips:
        for mode, options in MODES.items():
            for condition in (False, True):
                result = engine.transcribe(root / clip["audio"], language=clip.get("language", "en"),
                                           numerics="single-row", speculation=False,
                                           condition_on_previous_text=condition, **options)
                errors, words = clip_errors(result.text, [clip["text"]])
                fell = ", ".join(f"{i}: {w.temperature:g}" for i, w in enumerate(result.windows) if w.temperature)
                print(f"| {clip['audio']} | {mode} | {'yes' if condition else 'no'} | {100 * errors / words:.1f} | "
                      f"{len(result.windows)} | {fell or '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
