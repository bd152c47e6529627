"""An hour of read speech: where long audio loses stretches of speech between windows.

    python -m benchmarks.studies.hour_of_speech [--model base] [--threads 2] [--repeats 10] [--json FILE]

The hour a helper built as a new user (session 58): the shared LJ Speech passage and longform.flac
alternated ``--repeats`` times (10: 63.5 min), the reference their manifests' texts in the same
order. Transcribed once with the engine's defaults (timestamps on, the fallback ladder, early-end
restarts). Prints windows, words, WER (``live_stream.words``: lower case, punctuation and number
formats folded) and in how many repeats the JFK sentence came through (a segment with "fellow
americans" within longform.flac's first 20 s): a window that ends early and a rule that skips the
rest of it lose that sentence first, since it follows the LJ passage's last words.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from benchmarks.data import shared_data_root
from benchmarks.metrics import edit_distance
from benchmarks.studies.live_stream import words
from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio

LJ, LONGFORM = "ljspeech_LJ001-0001_to_0032_concat.flac", "longform.flac"


def build_hour(root, repeats: int) -> tuple[np.ndarray, str]:
    """The audio and its reference text: (LJ passage, longform.flac) ``repeats`` times."""
    refs = {}
    for line in (root / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            refs[item["audio"].rsplit("/", 1)[-1]] = item["text"]
    lj, longform = load_audio(root / LJ), load_audio(root / LONGFORM)
    return np.concatenate([lj, longform] * repeats), " ".join([refs[LJ], refs[LONGFORM]] * repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.hour_of_speech")
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None, help="write the text and windows here")
    args = ap.parse_args(argv)
    root = shared_data_root(args.data) / "longform"
    audio, reference = build_hour(root, args.repeats)
    engine = WhisperEngine(args.model, threads=args.threads)
    t0 = time.perf_counter()
    result = engine.transcribe(audio)
    wall = time.perf_counter() - t0
    ref, hyp = words(reference), words(result.text)
    lj_s, cycle_s = load_audio(root / LJ).size / SAMPLE_RATE, audio.size / SAMPLE_RATE / args.repeats
    jfk = sum(any("fellow americans" in s.text.lower() and i * cycle_s + lj_s - 2 <= s.start_s <= i * cycle_s + lj_s + 20
                  for s in result.segments) for i in range(args.repeats))
    print(f"| audio | windows | words | WER | JFK sentences | wall (RTF) |\n|---|---:|---:|---:|---:|---:|\n"
          f"| {audio.size / SAMPLE_RATE:.0f} s | {len(result.windows)} | {len(hyp)} | "
          f"{100 * edit_distance(ref, hyp) / len(ref):.2f} % | "
          f"{jfk} of {args.repeats} | {wall:.0f} s "
          f"({wall * SAMPLE_RATE / audio.size:.3f}) |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"text": result.text, "wall_s": wall,
                       "windows": [[w.start_s, w.end_s, [[s.start_s, s.end_s, s.text] for s in w.segments]]
                                   for w in result.windows]}, f, indent=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
