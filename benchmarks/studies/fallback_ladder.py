"""Should the temperature ladder be on by default? Every clip of the shared sets through the
engine's defaults, greedy only (``temperature=0``) and with faster-whisper's ladder
(``0, 0.2, ..., 1.0``, retried while a window's text loops: gzip compression ratio above 2.4),
one after the other on the same engine.

Reports per set: windows that fell back (and to which temperature), WER of both, clips whose
text differs, and seconds of both (the ladder costs time only where a window fails; every other
window decodes the same tokens in the same time).

    python -m benchmarks.studies.fallback_ladder --out results/fallback-ladder.json [--sets real,read] [--half validate]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.data import HALVES, half, load_set, shared_data_root
from benchmarks.machine import kernel_class
from benchmarks.metrics import wer

MODES = ("greedy", "ladder")


def _decode(engine, clip, temperature, audio_ctx: str) -> dict:
    t0 = time.perf_counter()
    result = engine.transcribe(str(clip.path), language=clip.language, temperature=temperature, audio_ctx=audio_ctx)
    seconds = time.perf_counter() - t0
    fell = [(i, w.temperature) for i, w in enumerate(result.windows) if w.temperature]
    return {"text": result.text, "tokens": result.tokens, "seconds": round(seconds, 4),
            "windows": len(result.windows), "fell_back": fell, "numerics": result.numerics,
            "audio_ctx_fallback": result.audio_ctx_fallback}


def run(sets: list[str], model: str, threads: int, which: str | None, audio_ctx: str, out: Path) -> dict:
    from specwhisper import WhisperEngine
    from specwhisper.fallback import LADDER

    engine = WhisperEngine(model, threads=threads)
    temperatures = {"greedy": 0.0, "ladder": LADDER}
    report: dict = {"machine": kernel_class(), "model": model, "threads": threads, "half": which,
                    "audio_ctx": audio_ctx, "sets": {}}
    for set_name in sets:
        clips = half(load_set(set_name, shared_data_root()), which)
        rows = [{"id": clip.id, **{mode: _decode(engine, clip, temperatures[mode], audio_ctx) for mode in MODES}}
                for clip in clips]
        summary: dict = {"clips": len(clips), "windows": sum(r["greedy"]["windows"] for r in rows)}
        for mode in MODES:
            summary[f"wer_{mode}"] = wer((r[mode]["text"], [c.text, *c.text_alt], c.language)
                                         for r, c in zip(rows, clips))
            summary[f"seconds_{mode}"] = round(sum(r[mode]["seconds"] for r in rows), 2)
        summary["fell_back"] = {r["id"]: r["ladder"]["fell_back"] for r in rows if r["ladder"]["fell_back"]}
        summary["decoded_in_full"] = {mode: sum(bool(r[mode]["audio_ctx_fallback"]) for r in rows) for mode in MODES}
        summary["text_differs"] = sum(r["greedy"]["text"] != r["ladder"]["text"] for r in rows)
        report["sets"][set_name] = {"summary": summary, "rows": rows}
        print(set_name, json.dumps(summary), flush=True)
        out.write_text(json.dumps(report, indent=1))
    _table(report)
    return report


def _table(report: dict) -> None:
    print("| set | clips | windows | fell back (clip: window, temperature) | WER greedy / ladder % | "
          "text differs | seconds greedy / ladder |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, data in report["sets"].items():
        s = data["summary"]
        fell = "; ".join(f"{cid}: " + ", ".join(f"{i} at {t:g}" for i, t in v) for cid, v in s["fell_back"].items())
        print(f"| {name} | {s['clips']} | {s['windows']} | {fell or '-'} | {100 * s['wer_greedy']:.2f} / "
              f"{100 * s['wer_ladder']:.2f} | {s['text_differs']} | {s['seconds_greedy']:.1f} / {s['seconds_ladder']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="real,read,longform,smarthome,car")
    parser.add_argument("--half", choices=HALVES, default=None, help="one half of each set (default: all clips)")
    parser.add_argument("--audio-ctx", default="full", help="the engine's encoder window (full, auto, N)")
    parser.add_argument("--model", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/fallback-ladder.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(args.sets.split(","), args.model, args.threads, args.half, args.audio_ctx, args.out)


if __name__ == "__main__":
    main()
