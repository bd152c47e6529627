"""What seeded sampling costs per token against greedy, in both numerics, side by side.

    python -m benchmarks.studies.sampling_cost [--clips 6] [--repeat 3] [--temperature 0.7]

Our engine, speculation off, the first read-speech clips; every clip runs greedy and sampled in
both numerics in turn each repeat. Reports decoder-call time per token (prefill excluded) and
the sampled/greedy ratio: sampling reads full logits and draws per-position noise where greedy
takes CT2's on-device argmax.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.data import shared_data_root
from specwhisper import WhisperEngine
from specwhisper.audio import load_audio


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.sampling_cost")
    ap.add_argument("--model", default="base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clips", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--data", default=None)
    args = ap.parse_args(argv)
    root = shared_data_root(args.data) / "read"
    lines = (root / "manifest.jsonl").read_text(encoding="utf-8").splitlines()[:args.clips]
    audios = [load_audio(root / json.loads(line)["audio"]) for line in lines]
    engine = WhisperEngine(args.model, threads=args.threads)
    systems = {f"{kind} {numerics}": dict(numerics=numerics, speculation=False,
                                          **({"temperature": args.temperature, "seed": 1} if kind == "sampled" else {}))
               for numerics in ("single-row", "batch-invariant") for kind in ("greedy", "sampled")}
    seconds = dict.fromkeys(systems, 0.0)
    tokens = dict.fromkeys(systems, 0)
    for _ in range(args.repeat):
        for audio in audios:
            for name, options in systems.items():
                result = engine.transcribe(audio, language="en", **options)
                seconds[name] += result.timings["decoder_s"] - result.timings["prefill_s"]
                tokens[name] += result.stats["tokens"]
    for name in systems:
        ms = 1000 * seconds[name] / tokens[name]
        greedy = name.replace("sampled", "greedy")
        ratio = (seconds[name] / tokens[name]) / (seconds[greedy] / tokens[greedy])
        print(f"{name:<26} {ms:6.2f} ms/token  x{ratio:.3f} of {greedy}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
