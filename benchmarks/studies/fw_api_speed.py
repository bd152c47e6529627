"""Our ``WhisperModel`` against faster-whisper's, same code, same settings, side by side.

    python -m benchmarks.studies.fw_api_speed --set longform --set read --limit 12 --repeat 2

Each implementation runs in its own interpreter (faster-whisper in the peer virtual environment,
whose upstream CTranslate2 would overwrite the fork's module), on the same files, in turns: one
process per implementation and mode, loaded once, then every file ``repeat`` times; the best time
per file counts. Modes: ``sequential`` (``model.transcribe``) and ``batched``
(``BatchedInferencePipeline(model).transcribe(batch_size=8)``), both ``beam_size=1``, base int8,
2 threads. Tokens are written too, so the batched runs can be compared across batch sizes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

WORKER = r"""
import json, sys, time
impl, mode, model_dir, files, repeat, batch_size = sys.argv[1:7]
files, repeat, batch_size = json.loads(files), int(repeat), int(batch_size)
if impl == "specwhisper":
    from specwhisper import BatchedInferencePipeline, WhisperModel
else:
    from faster_whisper import BatchedInferencePipeline, WhisperModel
model = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=2)
runner = BatchedInferencePipeline(model) if mode == "batched" else model
kw = dict(batch_size=batch_size) if mode == "batched" else {}
out = []
for path in files:
    best, tokens, text = None, None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        segments, info = runner.transcribe(path, beam_size=1, language="en", **kw)
        segments = list(segments)
        took = time.perf_counter() - t0
        best = took if best is None else min(best, took)
        tokens = [t for s in segments for t in s.tokens]
        text = "".join(s.text for s in segments)
        account = getattr(info, "specwhisper", None) or {}
    out.append({"file": path, "seconds": best, "tokens": tokens, "text": text,
                "timings": account.get("timings"), "numerics": account.get("numerics"),
                "stats": {k: account.get("stats", {}).get(k) for k in ("tokens", "decoder_calls", "accepted")}})
print(json.dumps(out))
"""


def run(python: str, impl: str, mode: str, model_dir: str, files: list[str], repeat: int, batch_size: int) -> list:
    done = subprocess.run([python, "-c", WORKER, impl, mode, model_dir, json.dumps(files), str(repeat),
                           str(batch_size)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from benchmarks.data import half, load_set, shared_data_root, subset
    from benchmarks.peer_env import peer_python
    from specwhisper.model_store import resolve_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", default=[], help="longform, read, real, ...")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--half", choices=("tune", "validate"), default="validate")
    parser.add_argument("--out", type=Path, default=Path("results/fw_api_speed.json"))
    args = parser.parse_args()
    model_dir = str(resolve_model("base", prefer_int8=True))
    report = {}
    for name in args.set or ["longform", "read"]:
        clips = load_set(name, shared_data_root())
        clips = subset(half(clips, args.half), args.limit)
        files = [str(c.path) for c in clips]
        for mode in ("sequential", "batched"):
            ours = run(sys.executable, "specwhisper", mode, model_dir, files, args.repeat, 8)
            theirs = run(str(peer_python()), "faster-whisper", mode, model_dir, files, args.repeat, 8)
            a, b = sum(r["seconds"] for r in ours), sum(r["seconds"] for r in theirs)
            same = sum(x["tokens"] == y["tokens"] for x, y in zip(ours, theirs))
            report[f"{name}/{mode}"] = {"ours_s": a, "faster_whisper_s": b, "speedup": b / a, "files": len(files),
                                        "same_tokens": same, "ours": ours, "theirs": theirs}
            phases = {k: sum((r["timings"] or {}).get(k, 0.0) for r in ours) for k in ("encoder_s", "decoder_s")}
            calls = sum(r["stats"]["decoder_calls"] or 0 for r in ours)
            tokens = sum(r["stats"]["tokens"] or 0 for r in ours)
            report[f"{name}/{mode}"].update(ours_phases=phases, ours_calls=calls, ours_tokens=tokens)
            print(f"{name:9s} {mode:10s} ours {a:7.2f} s  faster-whisper {b:7.2f} s  {b / a:4.2f}x  "
                  f"same tokens {same}/{len(files)}  (ours: encoder {phases['encoder_s']:.2f} s, decoder "
                  f"{phases['decoder_s']:.2f} s, {tokens} tokens in {calls} calls)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M"), "runs": report}, indent=1))


if __name__ == "__main__":
    main()
