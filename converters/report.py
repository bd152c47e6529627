"""Disk size, load time and peak memory of a float16 CT2 model versus its int8 re-encoding.

    python -m specwhisper.converters.report MODEL_DIR [--int8-dir DIR] [--repeats 3] [--json OUT]

Each load runs in a fresh Python process (peak RSS is per process), loading with
``compute_type="int8"`` on the CPU with 2 threads; the numbers are medians over ``--repeats``
alternating runs, so both files see the same page-cache state. Without ``--int8-dir`` the int8
copy is written to a temporary folder with :func:`quantize_ct2_model` and timed too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .quantize import quantize_ct2_model

_PROBE = r"""
import json, resource, sys, time
import ctranslate2
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
m = ctranslate2.models.Whisper(sys.argv[1], device="cpu", compute_type=sys.argv[2], intra_threads=int(sys.argv[3]))
load = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"load_s": load, "peak_rss_mb": peak / 1024, "rss_before_load_mb": base / 1024}))
"""


def measure_load(model_dir: str | Path, compute_type: str = "int8", threads: int = 2) -> dict:
    """Load time and peak RSS of loading one model in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(model_dir), compute_type, str(threads)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_bytes(model_dir: str | Path) -> int:
    return (Path(model_dir) / "model.bin").stat().st_size


def compare(fp16_dir: str | Path, int8_dir: str | Path, repeats: int = 3, threads: int = 2) -> dict:
    """Median load time / peak RSS of both files, loaded as int8, plus their sizes."""
    runs: dict[str, list[dict]] = {"float16 file": [], "int8 file": []}
    for _ in range(repeats):
        runs["float16 file"].append(measure_load(fp16_dir, "int8", threads))
        runs["int8 file"].append(measure_load(int8_dir, "int8", threads))
    result = {}
    for label, path in (("float16 file", fp16_dir), ("int8 file", int8_dir)):
        rs = runs[label]
        result[label] = {
            "path": str(path),
            "model_bin_mb": model_bytes(path) / 1e6,
            "load_s": statistics.median(r["load_s"] for r in rs),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
            "rss_before_load_mb": statistics.median(r["rss_before_load_mb"] for r in rs),
        }
    return result


def format_table(result: dict) -> str:
    lines = ["| file (loaded as int8) | model.bin MB | load s | peak RSS MB | RSS before load MB |",
             "|---|---|---|---|---|"]
    for label, r in result.items():
        if not isinstance(r, dict) or "load_s" not in r:
            continue
        lines.append(f"| {label} | {r['model_bin_mb']:.1f} | {r['load_s']:.3f} | {r['peak_rss_mb']:.0f} | "
                     f"{r['rss_before_load_mb']:.0f} |")
    if "quantize_s" in result:
        lines.append(f"\nre-encoding float16 -> int8 took {result['quantize_s']:.2f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specwhisper.converters.report", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="a float16 CT2 model directory")
    ap.add_argument("--int8-dir", default=None, help="an existing int8 copy (default: make one in a temp dir)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specwhisper-report-") as tmp:
        int8_dir = args.int8_dir
        quantize_s = None
        if int8_dir is None:
            t = time.perf_counter()
            int8_dir = quantize_ct2_model(args.model_dir, Path(tmp) / "int8")
            quantize_s = time.perf_counter() - t
        result = compare(args.model_dir, int8_dir, args.repeats, args.threads)
    if quantize_s is not None:
        result["quantize_s"] = quantize_s
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
