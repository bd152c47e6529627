"""Encoder ms per window, side by side in one run: the fork's CTranslate2, the ONNX Runtime graphs
built from the same weights (int8 per-row, int8 per-call, float32), the same weights on OpenVINO
(int8 weights with bfloat16 or float32 activations, float32; where installed), and upstream
CTranslate2 (what faster-whisper runs) in the peer venv; at full context and at short
``--audio-ctx`` windows.

    python -m benchmarks.studies.encoder_speed --models base,tiny.en --frames 3000,1000,600 --out results/encoder-speed.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import kernel_class

PEER = """
import sys, time, json, numpy as np, ctranslate2
model_dir, feats_path, threads, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = ctranslate2.models.Whisper(model_dir, compute_type="int8", intra_threads=threads)
out = {}
for frames, f in np.load(feats_path).items():
    view = ctranslate2.StorageView.from_array(np.ascontiguousarray(f))
    m.encode(view, to_cpu=True)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter(); m.encode(view, to_cpu=True); ts.append(time.perf_counter() - t0)
    out[frames] = 1000 * float(np.median(ts))
print(json.dumps({"version": ctranslate2.__version__, "ms": out}))
"""


def _features(frames: list[int]) -> dict[str, np.ndarray]:
    from specwhisper.audio import load_audio
    from specwhisper.features import log_mel_spectrogram, window_features

    mel = log_mel_spectrogram(load_audio(Path(__file__).parents[2] / "engine" / "samples" / "morning.flac"))
    return {str(n): window_features(mel, 0, n_frames=n)[None].astype(np.float32) for n in frames}


def ours(model: str, feats: dict[str, np.ndarray], threads: int, repeat: int) -> dict[str, dict[str, float]]:
    import ctranslate2

    from specwhisper.backend import to_host
    from specwhisper.encoders import CT2Encoder, OnnxEncoder, OpenVinoEncoder, _installed
    from specwhisper.model_store import resolve_model

    int8_dir, float_dir = resolve_model(model, prefer_int8=True), resolve_model(model)
    encoders = {"fork-ct2-int8": CT2Encoder(ctranslate2.models.Whisper(str(int8_dir), compute_type="int8",
                                                                       intra_threads=threads))}
    for precision in ("int8", "int8-tensor", "float32"):
        encoders[f"onnx-{precision}"] = OnnxEncoder(float_dir if precision == "float32" else int8_dir, precision, threads)
    if _installed("openvino"):
        for precision in ("int8", "float32"):
            encoder = OpenVinoEncoder(float_dir if precision == "float32" else int8_dir, precision, threads)
            encoders[f"openvino-{precision}-{encoder.inference_precision}"] = encoder
    else:
        print("openvino not installed: its encoder not timed (pip install 'specwhisper[openvino]')", file=sys.stderr)
    seconds: dict[str, dict[str, list[float]]] = {n: {f: [] for f in feats} for n in encoders}
    for frames, f in feats.items():
        for encoder in encoders.values():
            to_host(encoder.encode(f[0]))  # warm-up per shape
        for _ in range(repeat):  # interleaved: a slow spell hits every backend alike
            for name, encoder in encoders.items():
                t0 = time.perf_counter()
                to_host(encoder.encode(f[0]))
                seconds[name][frames].append(time.perf_counter() - t0)
    return {n: {f: round(1000 * float(np.median(v)), 1) for f, v in by.items()} for n, by in seconds.items()}


def peer(model: str, feats: dict[str, np.ndarray], threads: int, repeat: int) -> dict:
    from benchmarks.peer_env import ensure_peer_venv, peer_python
    from specwhisper.model_store import resolve_model

    ensure_peer_venv(quiet=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "feats.npz"
        np.savez(path, **feats)
        done = subprocess.run([str(peer_python()), "-c", PEER, str(resolve_model(model, prefer_int8=True)), str(path),
                               str(threads), str(repeat)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="base,tiny.en")
    parser.add_argument("--frames", default="3000,1000,600")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results/encoder-speed.json"))
    args = parser.parse_args()
    feats = _features([int(n) for n in args.frames.split(",")])
    report = {"machine": kernel_class(), "threads": args.threads, "models": {}}
    for model in args.models.split(","):
        row = ours(model, feats, args.threads, args.repeat)
        upstream = peer(model, feats, args.threads, args.repeat)
        row[f"upstream-ct2-{upstream['version']}-int8"] = upstream["ms"]
        report["models"][model] = row
        for name, by in row.items():
            ratio = {f: round(row["fork-ct2-int8"][f] / ms, 2) for f, ms in by.items()}
            print(f"{model:8} {name:28} " + "  ".join(f"{f}: {ms:7.1f} ms ({ratio[f]}x)" for f, ms in by.items()),
                  flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
