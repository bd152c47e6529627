"""``specwhisper batch`` on this machine: throughput of each runner, Ray's overhead, and what cutting
long files into pieces does to the text (issue 22).

    python -m benchmarks.studies.batch_throughput --set read --half validate --limit 40 --repeat 2

Runners, one after another in one process, each from a fresh output folder with the model loaded
inside the timed run (as a user's job pays it): local sequential (one engine, 2 threads), a local
process pool (2 workers x 1 thread), Ray with 1 worker x 2 threads and 2 workers x 1 thread on a
local cluster started once beforehand (its start is timed apart). Throughput is audio hours per
wall hour; every runner's tokens are compared with the sequential run's. Then the long-form files
are transcribed whole and cut into pieces of ``--piece-s`` seconds, and both are scored against
their references (WER after Whisper's English normaliser).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.data import half, load_set, shared_data_root, subset
from benchmarks.machine import kernel_class, machine_info
from benchmarks.metrics import wer

RUNNERS = (("local sequential", None, 1, 2), ("local process pool", None, 2, 1), ("Ray, 1 worker", "auto", 1, 2),
           ("Ray, 2 workers", "auto", 2, 1))


def _tokens(folder: Path) -> dict[str, list[int]]:
    return {p.name: json.loads(p.read_text())["tokens"] for p in sorted(folder.glob("*.json"))}


def throughput(files: list[Path], audio_s: float, model: str, repeat: int, work: Path) -> list[dict]:
    import ray

    from specwhisper.batch import transcribe_batch

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - start
    rows: dict[str, dict] = {}
    reference = None
    try:
        for turn in range(repeat):
            order = RUNNERS if turn % 2 == 0 else tuple(reversed(RUNNERS))
            for label, address, workers, threads in order:
                out = work / f"{label.replace(' ', '_').replace(',', '')}-{turn}"
                t0 = time.perf_counter()
                report = transcribe_batch([str(f) for f in files], str(out), formats=("json",), ray=address,
                                          workers=workers, threads_per_worker=threads, model=model, language="en")
                wall = time.perf_counter() - t0
                assert report.ok, [o.error for o in report.failed]
                tokens = _tokens(out)
                reference = reference or tokens
                row = rows.setdefault(label, {"runner": label, "workers": workers, "threads": threads,
                                              "walls": [], "tokens_equal": True})
                row["walls"].append(round(wall, 2))
                row["tokens_equal"] &= tokens == reference
    finally:
        ray.shutdown()
    for row in rows.values():
        best = min(row["walls"])
        row.update(wall_s=best, audio_hours_per_hour=round(audio_s / best, 1))
    result = list(rows.values())
    seq = next(r["wall_s"] for r in result if r["runner"] == "local sequential")
    ray1 = next(r["wall_s"] for r in result if r["runner"] == "Ray, 1 worker")
    result.append({"runner": "Ray cluster start (once)", "wall_s": round(ray_start, 2),
                   "ray_per_file_overhead_s": round((ray1 - seq) / len(files), 3)})
    return result


def pieces_wer(model: str, piece_s: float, work: Path) -> list[dict]:
    from specwhisper.batch import transcribe_batch

    root = shared_data_root()
    rows = []
    for clip in load_set("longform", root):
        row = {"file": clip.path.name, "duration_s": clip.duration_s}
        for label, piece in (("whole", None), (f"pieces of {piece_s:.0f} s", piece_s)):
            out = work / f"wer-{label.split()[0]}"
            t0 = time.perf_counter()
            transcribe_batch([str(clip.path)], str(out), formats=("json",), piece_s=piece, model=model,
                             language="en", threads_per_worker=2)
            data = json.loads((out / f"{clip.path.stem}.json").read_text())
            row[label] = {"wer": round(wer([(data["text"], [clip.text], "en")]) or 0.0, 4),
                          "pieces": len(data.get("pieces", [])) or 1, "wall_s": round(time.perf_counter() - t0, 2)}
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="read")
    parser.add_argument("--half", default="validate")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", default="base")
    parser.add_argument("--piece-s", type=float, default=60.0)
    parser.add_argument("--out", default="results/batch_throughput.json")
    args = parser.parse_args(argv)
    clips = subset(half(load_set(args.set, shared_data_root()), args.half), args.limit)
    audio_s = sum(c.duration_s for c in clips)
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as tmp:
        work = Path(tmp)
        report = {"machine": machine_info(), "kernels": kernel_class(), "set": args.set, "half": args.half,
                  "files": len(clips), "audio_s": round(audio_s, 1), "model": args.model,
                  "throughput": throughput([c.path for c in clips], audio_s, args.model, args.repeat, work),
                  "pieces": pieces_wer(args.model, args.piece_s, work)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
