"""Which fallback rules should be on by default? Every clip of the shared sets through the
engine's defaults, one decoding mode after the other on the same engine:

* ``greedy``: temperature 0 only;
* ``ladder``: faster-whisper's ladder (``0, 0.2, ..., 1.0``, retried while a window's text loops:
  gzip compression ratio above 2.4), the engine's default since session 52;
* ``thresholds``: the ladder with faster-whisper's and Whisper's other two defaults: retried
  while the mean token log-probability is under -1, and a window skipped whose ``<|nospeech|>``
  probability is over 0.6 while its text is that unlikely (the no-speech rule).

Reports per set: windows that fell back (and to which temperature) or were skipped, WER of each
mode, clips whose text differs from the first mode's, and seconds of each. The ``noise`` set is
made here (no shared set has audio without speech): 20-45 s of white, brown and mains-hum noise
at several levels, digital silence and a sequence of tones; its reference is empty, so the table
gives the words each mode wrote into it.

    python -m benchmarks.studies.fallback_ladder --out results/fallback-ladder.json [--sets real,read] [--half validate]
    python -m benchmarks.studies.fallback_ladder --modes ladder,thresholds --sets real,read,longform,smarthome,car,noise
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.data import HALVES, Clip, half, load_set, shared_data_root
from benchmarks.machine import kernel_class
from benchmarks.metrics import wer
from benchmarks.studies.live_stream import words

NO_SPEECH = {"log_prob_threshold": -1.0, "no_speech_threshold": 0.6}  # faster-whisper's defaults
MODES = {"greedy": {"temperature": 0.0}, "ladder": {}, "thresholds": NO_SPEECH}


def noise_clips(folder: Path, seed: int = 0) -> list[Clip]:
    """Audio with no speech in it, written to ``folder`` as FLAC: what a recorder picks up between
    words (room noise at several levels, mains hum, digital silence, tones). Seeded: the same
    files every run."""
    import soundfile as sf

    rng, sr = np.random.default_rng(seed), 16000

    def dbfs(x: np.ndarray, level: float) -> np.ndarray:
        return (x / np.sqrt(np.mean(x ** 2)) * 10 ** (level / 20)).astype(np.float32)

    def brown(n: int) -> np.ndarray:
        x = np.cumsum(rng.standard_normal(n))
        return x - np.convolve(x, np.ones(1600) / 1600, "same")  # no drift below 10 Hz

    t20 = np.arange(20 * sr) / sr
    tones = np.concatenate([np.sin(2 * np.pi * f * t20[: sr // 2]) for f in rng.uniform(200, 900, 40)])
    made = {
        "white-30dB": dbfs(rng.standard_normal(20 * sr), -30), "white-45dB": dbfs(rng.standard_normal(20 * sr), -45),
        "white-60dB": dbfs(rng.standard_normal(45 * sr), -60), "brown-35dB": dbfs(brown(20 * sr), -35),
        "hum-40dB": dbfs(sum(np.sin(2 * np.pi * 50 * k * t20) / k for k in (1, 2, 3, 5)), -40),
        "silence": np.zeros(20 * sr, np.float32), "tones-30dB": dbfs(tones, -30),
    }
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for name, audio in made.items():
        path = folder / f"{name}.flac"
        sf.write(path, audio, sr)
        clips.append(Clip(set="noise", id=name, path=path, rel=f"noise/{name}.flac", text="", duration_s=audio.size / sr))
    return clips


def _decode(engine, clip, options: dict, audio_ctx: str) -> dict:
    t0 = time.perf_counter()
    result = engine.transcribe(str(clip.path), language=clip.language, audio_ctx=audio_ctx, **options)
    seconds = time.perf_counter() - t0
    fell = [(i, w.temperature) for i, w in enumerate(result.windows) if w.temperature]
    skipped = [i for i, w in enumerate(result.windows) if not w.text and w.no_speech_prob is not None
               and w.no_speech_prob > options.get("no_speech_threshold", 1.0)]
    return {"text": result.text, "tokens": result.tokens, "seconds": round(seconds, 4),
            "windows": len(result.windows), "fell_back": fell, "skipped": skipped, "numerics": result.numerics,
            "audio_ctx_fallback": result.audio_ctx_fallback}


def run(sets: list[str], modes: list[str], model: str, threads: int, which: str | None, audio_ctx: str,
        out: Path) -> dict:
    from specwhisper import WhisperEngine

    engine = WhisperEngine(model, threads=threads)
    report: dict = {"machine": kernel_class(), "model": model, "threads": threads, "half": which,
                    "audio_ctx": audio_ctx, "modes": modes, "sets": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for set_name in sets:
            clips = (noise_clips(Path(scratch)) if set_name == "noise"
                     else half(load_set(set_name, shared_data_root()), which))
            rows = [{"id": clip.id, **{mode: _decode(engine, clip, MODES[mode], audio_ctx) for mode in modes}}
                    for clip in clips]
            summary: dict = {"clips": len(clips), "windows": sum(r[modes[0]]["windows"] for r in rows)}
            for mode in modes:
                summary[f"wer_{mode}"] = wer((r[mode]["text"], [c.text, *c.text_alt], c.language)
                                             for r, c in zip(rows, clips))
                summary[f"words_{mode}"] = sum(len(words(r[mode]["text"])) for r in rows)
                summary[f"seconds_{mode}"] = round(sum(r[mode]["seconds"] for r in rows), 2)
                summary[f"fell_back_{mode}"] = {r["id"]: r[mode]["fell_back"] for r in rows if r[mode]["fell_back"]}
                summary[f"skipped_{mode}"] = {r["id"]: r[mode]["skipped"] for r in rows if r[mode]["skipped"]}
            summary["decoded_in_full"] = {mode: sum(bool(r[mode]["audio_ctx_fallback"]) for r in rows) for mode in modes}
            summary["text_differs"] = {mode: sum(r[modes[0]]["text"] != r[mode]["text"] for r in rows)
                                       for mode in modes[1:]}
            report["sets"][set_name] = {"summary": summary, "rows": rows}
            print(set_name, json.dumps(summary), flush=True)
            out.write_text(json.dumps(report, indent=1))
    _table(report)
    return report


def _events(per_clip: dict, what: str) -> str:
    return "; ".join(f"{cid}: " + ", ".join(what.format(*e) if isinstance(e, (list, tuple)) else what.format(e)
                                            for e in v) for cid, v in per_clip.items())


def _table(report: dict) -> None:
    modes = report["modes"]
    both = " / ".join(modes)
    print(f"| set | clips | windows | fell back (clip: window at temperature), per mode | skipped windows | "
          f"WER {both} % | words {both} | text differs | seconds {both} |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|")
    for name, data in report["sets"].items():
        s = data["summary"]
        fell = " // ".join(f"{m}: {_events(s[f'fell_back_{m}'], '{} at {:g}') or '-'}" for m in modes)
        skipped = " // ".join(f"{m}: {_events(s[f'skipped_{m}'], '{}') or '-'}" for m in modes)
        seconds = " / ".join(f"{s['seconds_' + m]:.1f}" for m in modes)
        wers = " / ".join("-" if s[f"wer_{m}"] is None else f"{100 * s[f'wer_{m}']:.2f}" for m in modes)
        print(f"| {name} | {s['clips']} | {s['windows']} | {fell} | {skipped} | {wers} | "
              f"{' / '.join(str(s[f'words_{m}']) for m in modes)} | "
              f"{' / '.join(str(v) for v in s['text_differs'].values()) or '-'} | "
              f"{seconds} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="real,read,longform,smarthome,car", help="shared sets, and noise")
    parser.add_argument("--modes", default="greedy,ladder", help=f"two or more of {', '.join(MODES)}; the first "
                        "is the one texts are compared with")
    parser.add_argument("--half", choices=HALVES, default=None, help="one half of each set (default: all clips)")
    parser.add_argument("--audio-ctx", default="full", help="the engine's encoder window (full, auto, N)")
    parser.add_argument("--model", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/fallback-ladder.json"))
    args = parser.parse_args()
    modes = args.modes.split(",")
    if len(set(modes)) != len(modes) or len(modes) < 2 or any(m not in MODES for m in modes):
        parser.error(f"--modes: two or more of {', '.join(MODES)}, each once")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(args.sets.split(","), modes, args.model, args.threads, args.half, args.audio_ctx, args.out)


if __name__ == "__main__":
    main()
