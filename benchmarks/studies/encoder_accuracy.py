"""Does the ONNX Runtime encoder change what users read? Every clip of the shared sets through the
engine's defaults with CTranslate2's int8 encoder, the ONNX int8 graph (on ONNX Runtime, and on
OpenVINO: bfloat16 where the CPU has it), and CTranslate2's float32
model (the spread that precision alone causes), side by side; and the ONNX encoder with every
window on the invariant decoder.

Reports per set: WER of each, clips whose tokens differ from CTranslate2 int8's, and at the
first differing token the top-1 minus top-2 logit margin under CTranslate2's encoder output (a
near-tie flipped, or a real change?).

    python -m benchmarks.studies.encoder_accuracy --out results/encoder-accuracy.json [--sets real,read]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.data import load_set, shared_data_root
from benchmarks.machine import kernel_class
from benchmarks.metrics import wer

# name -> (compute type, encoder, batch decoder, numerics); "onnx-invariant": every window on the ONNX
# Runtime invariant decoder (the numerics where speculation is always exact, and whose 1-row step is
# faster than the fork's on this project's AVX-512 EPYC): is its text as good?
SYSTEMS = {"ct2-int8": ("int8", "ct2", "auto", "auto"), "onnx-int8": ("int8", "onnx", "auto", "auto"),
           "openvino-int8": ("int8", "openvino", "auto", "auto"),
           "ct2-float32": ("float32", "ct2", "auto", "auto"),
           "onnx-invariant": ("int8", "onnx", "invariant", "batch-invariant")}
REFERENCE = "ct2-int8"
ENCODER_VARIANTS = ("onnx-int8", "openvino-int8")  # whose first differing token gets a margin


def _margin(engine, features_first_window: np.ndarray, prompt: list[int], prefix: list[int]) -> float:
    """Top-1 minus top-2 logit after ``prefix`` (single-row, the fork's decoder) on ``engine``'s encoder output."""
    from specwhisper.backend import to_host

    lm = engine.lm
    state, logits = lm.decoder.prefill(lm.encode(features_first_window), prompt)
    for token in prefix:
        logits = lm.decoder.forward_step(state, token)
    row = np.sort(to_host(logits).reshape(-1).astype(np.float64))
    return float(row[-1] - row[-2])


def run(sets: list[str], model: str, threads: int, out: Path, systems: list[str]) -> dict:
    from specwhisper import WhisperEngine
    from specwhisper.audio import load_audio
    from specwhisper.features import content_frames, log_mel_spectrogram, window_features

    root = shared_data_root()
    engines = {name: WhisperEngine(model, compute_type=ct, threads=threads, encoder=enc, batch_decoder=bd)
               for name, (ct, enc, bd, _) in SYSTEMS.items() if name in systems}
    report: dict = {"machine": kernel_class(), "model": model, "threads": threads, "sets": {}}
    for set_name in sets:
        clips = load_set(set_name, root)
        rows = []
        t0 = time.perf_counter()
        for clip in clips:
            row = {"id": clip.id}
            for name, engine in engines.items():
                result = engine.transcribe(str(clip.path), language=clip.language, numerics=SYSTEMS[name][3])
                row[name] = {"text": result.text, "tokens": result.tokens}
            ref = row[REFERENCE]["tokens"]
            for name in (n for n in ENCODER_VARIANTS if n in engines):
                other = row[name]["tokens"]
                if ref != other and clip.duration_s <= 30:
                    at = next((i for i, (a, b) in enumerate(zip(ref, other)) if a != b), min(len(ref), len(other)))
                    mel = log_mel_spectrogram(load_audio(str(clip.path)), n_mels=engines[REFERENCE].lm.n_mels)
                    features = window_features(mel[:, :content_frames(mel)], 0)
                    prompt = engines[REFERENCE].tokenizer.sot_sequence(clip.language)
                    row[f"first_diff_{name}"] = at
                    row[f"margin_ct2_{name}"] = _margin(engines[REFERENCE], features, prompt, ref[:at])
            rows.append(row)
        summary = {"clips": len(clips), "seconds": round(time.perf_counter() - t0, 1)}
        for name in engines:
            summary[f"wer_{name}"] = wer((r[name]["text"], [c.text, *c.text_alt], c.language)
                                         for r, c in zip(rows, clips))
            summary[f"differ_{name}"] = sum(r[name]["tokens"] != r[REFERENCE]["tokens"] for r in rows)
            margins = [r[f"margin_ct2_{name}"] for r in rows if f"margin_ct2_{name}" in r]
            if margins:
                summary[f"margins_ct2_at_first_diff_{name}"] = sorted(round(m, 3) for m in margins)
        report["sets"][set_name] = {"summary": summary, "rows": rows}
        print(set_name, json.dumps(summary), flush=True)
        out.write_text(json.dumps(report, indent=1))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="real,read,longform,smarthome,car")
    parser.add_argument("--model", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"some of {', '.join(SYSTEMS)}; "
                        f"{REFERENCE} always runs (the reference)")
    parser.add_argument("--out", type=Path, default=Path("results/encoder-accuracy.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    systems = [REFERENCE, *(n for n in args.systems.split(",") if n != REFERENCE)]
    unknown = [n for n in systems if n not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {', '.join(unknown)}: use some of {', '.join(SYSTEMS)}")
    run(args.sets.split(","), args.model, args.threads, args.out, systems)


if __name__ == "__main__":
    main()
