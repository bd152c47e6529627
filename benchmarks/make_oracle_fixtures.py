"""Write the faster-whisper oracle fixtures the engine's tests compare against.

    python -m benchmarks.make_oracle_fixtures [--base DIR] [--tiny DIR] [--data ROOT] [--out tests/fixtures]

* ``mel_oracle.npz``: faster-whisper's log-mel of 4 shared clips, exactly as its encoder sees the
  first window, cut to the audio frames + 50 padding frames (float32, compressed), plus jfk at 128
  bins (first 300 frames). ``meta`` (a JSON string) records versions, clip paths and the exact call.
* ``fw_greedy_<kernel class>.json``: faster-whisper greedy transcripts (text and token ids) of the 7
  sentence clips in real/ for base and tiny.en, one file per vendor and vector ISA
  (``benchmarks.machine.kernel_class``: near-tie tokens differ between them; run it with
  ``ONEDNN_MAX_CPU_ISA=AVX2`` on an AMD CPU with AVX-512 for the AVX2 file).
* ``fw_facade_<kernel class>.json``: faster-whisper's ``WhisperModel.transcribe`` segments (id, seek,
  start, end, text, tokens, avg_logprob, no_speech_prob, compression_ratio, temperature) of the 7
  sentence clips and the 2 long-form files with base-int8, greedy (``beam_size=1``), no VAD, its
  defaults otherwise (timestamps, condition_on_previous_text, the temperature ladder), plus jfk with
  ``word_timestamps=True`` (words' start, end, probability): what ``specwhisper.WhisperModel`` is
  compared with in tests/test_fw_facade_parity.py (``--only facade``).
* ``fw_hallucination_<kernel class>.json``: faster-whisper's segments and words with
  ``hallucination_silence_threshold`` off, 1.0 and 2.0 on a recording with 25 s of hum between two
  clips (``hallucination_input``), tiny.en greedy (``--only hallucination``).
* ``fw_chunk_length_<kernel class>.json``: the facade fixture's call with ``chunk_length`` 10 and 20
  and ``temperature=0.0`` (greedy only, so deterministic) on jfk, a 14.6 s LibriSpeech read clip and
  longform.flac, plus jfk with word timings, the read clip without timestamps and longform.flac with
  ``clip_timestamps`` at 10 s (``--only chunk``; tests/test_fw_facade_parity.py).

Runs faster-whisper in the peer environment (``peer_env``), fed the samples our loader decoded
(the facade fixture: the file path, decoded by faster-whisper itself, as a user calls it; the
samples are checked equal to our loader's).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from specwhisper.audio import load_audio
from specwhisper.io_utils import atomic_write_bytes, atomic_write_text

from .data import REPO, Clip, load_set, shared_data_root
from .machine import cpu_vendor, kernel_class
from .peer_env import PeerWorker, ensure_peer_venv

MEL_CLIPS = ("jfk", "librispeech_1272-128104-0001", "fsdd_0_george_7", "car_000")
EXTRA_FRAMES = 50
MEL128_FRAMES = 300
MEL_CALL = ("features = FeatureExtractor(feature_size=N)(audio)  # padding=160 zero samples appended, "
            "chunk_length=None; content_frames = features.shape[-1] - 1; "
            "window = faster_whisper.audio.pad_or_trim(features[:, :min(content_frames, 3000)])  "
            "# zero-pads in the log-mel domain to 3000 frames; stored: window[:, :content_frames + 50]")
FW_GREEDY_CALL = ("WhisperModel(model_dir, device='cpu', compute_type='int8', cpu_threads=2, num_workers=1)"
                  ".transcribe(audio, language='en', beam_size=1, temperature=0.0, without_timestamps=True, "
                  "vad_filter=False, condition_on_previous_text=False)")
FW_FACADE_CALL = ("WhisperModel(model_dir, device='cpu', compute_type='int8', cpu_threads=2)"
                  ".transcribe(path, language='en', beam_size=1, vad_filter=False)")
FW_FACADE_WORDS_CLIPS = ("jfk",)  # also run with word_timestamps=True
FW_CHUNK_CLIPS = (("real", "jfk"), ("read", "1040-133433-0000"), ("longform", "longform"))
FW_CHUNK_LENGTHS = (10, 20)
# Run by the peer venv's python (upstream ctranslate2 + faster-whisper; nothing of ours importable).
# stdin: {"model", "threads", "clips": [{"id", "path", "npy", "word_timestamps"}]}; stdout: one JSON
# line per run (two for a clip with a sampled window: the default run, then temperature=0.0).
_FACADE_PEER = r"""
import json, sys, time
import numpy as np
from faster_whisper import WhisperModel, decode_audio
job = json.loads(sys.stdin.read())
model = WhisperModel(job["model"], device="cpu", compute_type="int8", cpu_threads=job["threads"])
# faster-whisper 1.2.1's FeatureExtractor keeps a call's chunk_length for every later call (it sets
# n_samples and nb_max_frames on itself): each run starts from the defaults again
extractor = model.feature_extractor
default_sizes = (extractor.n_samples, extractor.nb_max_frames)

def run(path, **options):
    t0 = time.perf_counter()
    segments, info = model.transcribe(path, language="en", beam_size=1, vad_filter=False, **options)
    rows = []
    for s in segments:
        row = {"id": s.id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text,
               "tokens": list(s.tokens), "avg_logprob": s.avg_logprob, "no_speech_prob": s.no_speech_prob,
               "compression_ratio": s.compression_ratio, "temperature": s.temperature}
        if s.words is not None:
            row["words"] = [{"start": w.start, "end": w.end, "word": w.word, "probability": w.probability}
                            for w in s.words]
        rows.append(row)
    extractor.n_samples, extractor.nb_max_frames = default_sizes
    return {"segments": rows, "seconds": time.perf_counter() - t0, "duration": info.duration}

for clip in job["clips"]:
    if clip.get("path") is None:  # samples made by our code (no file to decode)
        source, same = np.load(clip["npy"]), True
    else:
        audio = decode_audio(clip["path"], sampling_rate=16000)
        ours = np.load(clip["npy"])
        same = audio.size == ours.size and bool(np.array_equal(audio, ours))
        source = clip["path"]
    extra = clip.get("options", {})
    res = run(source, word_timestamps=clip["word_timestamps"], **extra)
    print(json.dumps({"id": clip["id"], "options": {"word_timestamps": clip["word_timestamps"], **extra}, **res,
                      "samples_equal_our_loader": same}), flush=True)
    if clip.get("path") is None:
        continue
    if any(s["temperature"] > 0 for s in res["segments"]):  # sampled: also the deterministic greedy-only run
        extra = {**extra, "temperature": 0.0}
        res = run(clip["path"], word_timestamps=clip["word_timestamps"], **extra)
        print(json.dumps({"id": clip["id"], "options": {"word_timestamps": clip["word_timestamps"], **extra}, **res,
                          "samples_equal_our_loader": same}), flush=True)
"""


def _save_npy(clip: Clip, into: Path) -> Path:
    path = into / f"{clip.set}_{clip.id}.npy"
    if not path.exists():
        np.save(path, load_audio(clip.path))
    return path


def make_mel_oracle(worker: PeerWorker, root: Path, tmp: Path, out: Path, versions: dict) -> Path:
    clips = {c.id: c for name in ("real", "car") for c in load_set(name, root)}
    jobs, meta_clips = [], {}
    for cid in MEL_CLIPS:
        clip = clips[cid]
        npy = _save_npy(clip, tmp)
        jobs.append({"id": f"mel80_{cid}", "npy": str(npy), "out": str(tmp / f"mel80_{cid}.npy"), "n_mels": 80,
                     "extra_frames": EXTRA_FRAMES, "path": str(clip.path)})
    jfk = clips["jfk"]
    jobs.append({"id": "mel128_jfk", "npy": str(_save_npy(jfk, tmp)), "out": str(tmp / "mel128_jfk.npy"),
                 "n_mels": 128, "extra_frames": EXTRA_FRAMES, "max_frames": MEL128_FRAMES})
    arrays: dict[str, np.ndarray] = {}
    for info in worker.run({"op": "mel", "clips": jobs}):
        key = info["id"]
        arrays[key] = np.load(tmp / f"{key}.npy")
        cid = key.split("_", 1)[1]
        meta_clips[key] = {"clip": clips[cid].rel, "shape": info["shape"], "content_frames": info["content_frames"],
                           "raw_frames": info["raw_frames"], "samples": int(np.load(_save_npy(clips[cid], tmp)).size),
                           "decode_audio_max_abs_diff": info.get("decode_audio_max_abs_diff")}
    meta = {
        "faster_whisper": versions["faster_whisper"], "ctranslate2": versions["ctranslate2"],
        "numpy": versions["numpy"], "data_root": "relative paths below are under the shared data root",
        "audio": "float32 16 kHz mono decoded by specwhisper.audio.load_audio (soundfile), fed as arrays; "
                 "decode_audio_max_abs_diff compares faster_whisper.decode_audio on the same file",
        "call": MEL_CALL, "extra_frames": EXTRA_FRAMES, "mel128_max_frames": MEL128_FRAMES,
        "arrays": meta_clips,
    }
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(json.dumps(meta, indent=1)), **arrays)
    return atomic_write_bytes(out / "mel_oracle.npz", buf.getvalue())


def make_fw_greedy(worker: PeerWorker, root: Path, tmp: Path, out: Path, models: dict[str, Path],
                   versions: dict) -> Path:
    sentences = [c for c in load_set("real", root) if c.kind == "sentence"]
    result: dict = {"faster_whisper": versions["faster_whisper"], "ctranslate2": versions["ctranslate2"],
                    "call": FW_GREEDY_CALL, "cpu_vendor": cpu_vendor(), "kernel_class": kernel_class(),
                    "note": "tokens: all segments' ids concatenated (SOT sequence and EOT excluded). "
                            "faster-whisper defaults left on: suppress_blank=True, suppress_tokens=[-1], "
                            "no_speech_threshold=0.6 with log_prob_threshold=-1.0 (a window whose no-speech "
                            "probability is > 0.6 and average log-prob < -1 is dropped), "
                            "compression_ratio_threshold=2.4 (no effect: a single temperature)",
                    "models": {}}
    for name, model_dir in models.items():
        rows = []
        for clip in sentences:
            print(f"[fixtures] fw greedy {name} {clip.id}", file=sys.stderr)
            job = {"op": "transcribe", "system": "fw-greedy", "model": str(model_dir), "device": "cpu",
                   "compute_type": "int8", "threads": 2, "npy": str(_save_npy(clip, tmp)), "language": "en"}
            (res,) = worker.run_all(job)
            rows.append({"id": clip.id, "clip": clip.rel, "text": res["text"], "tokens": res["tokens"],
                         "segments": [{"text": s["text"], "tokens": s["tokens"]} for s in res["segments"]]})
        result["models"][name] = {"model_dir_name": Path(model_dir).name, "clips": rows}
    return atomic_write_text(out / f"fw_greedy_{kernel_class()}.json",
                             json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def facade_clips(root: Path) -> list[Clip]:
    """The 7 sentence clips of real/, then the 2 long-form files (longform.flac and the 231 s LJ Speech passage)."""
    return [c for c in load_set("real", root) if c.kind == "sentence"] + load_set("longform", root)


def make_fw_facade(root: Path, tmp: Path, out: Path, model_dir: Path, versions: dict) -> Path:
    jobs = []
    for clip in facade_clips(root):
        npy = str(_save_npy(clip, tmp))
        jobs.append({"id": clip.id, "path": str(clip.path), "npy": npy, "word_timestamps": False})
        if clip.id in FW_FACADE_WORDS_CLIPS:
            jobs.append({"id": clip.id, "path": str(clip.path), "npy": npy, "word_timestamps": True})
    rel = {c.id: c.rel for c in facade_clips(root)}
    print(f"[fixtures] fw facade: {len(jobs)} runs in the peer environment", file=sys.stderr)
    runs = _facade_runs(model_dir, jobs, rel, "facade")
    result = {"faster_whisper": versions["faster_whisper"], "ctranslate2": versions["ctranslate2"],
              "call": FW_FACADE_CALL, "model_dir_name": model_dir.name, "cpu_vendor": cpu_vendor(),
              "kernel_class": kernel_class(),
              "note": "faster-whisper's defaults otherwise: without_timestamps=False, condition_on_previous_text="
                      "True, temperature=(0.0, 0.2, ..., 1.0) with compression_ratio_threshold=2.4, "
                      "log_prob_threshold=-1.0, no_speech_threshold=0.6, suppress_blank=True, suppress_tokens=[-1]. "
                      "Runs with word_timestamps=True add words (start, end, word, probability). "
                      "faster_whisper.decode_audio gave the very samples specwhisper.audio.load_audio gives. "
                      "Windows decoded at a temperature above 0 are samples: faster-whisper does not seed "
                      "CTranslate2's random generator, so they (and every window after them, whose seek and "
                      "prompt follow from them) differ from run to run; each run with such a window is "
                      "followed by a run of the same clip with temperature=0.0 (greedy only, deterministic).",
              "runs": runs}
    return atomic_write_text(out / f"fw_facade_{kernel_class()}.json",
                             json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def _facade_runs(model_dir: Path, jobs: list[dict], rel: dict[str, str], what: str) -> list[dict]:
    """``jobs`` through ``_FACADE_PEER`` in the peer environment; the runs as the fixtures record
    them (each file decoded by faster-whisper checked equal to our loader's samples)."""
    proc = subprocess.run([str(ensure_peer_venv()), "-c", _FACADE_PEER], capture_output=True, text=True,
                          input=json.dumps({"model": str(model_dir), "threads": 2, "clips": jobs}),
                          env=_peer_env(), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"faster-whisper {what} run failed:\n{proc.stderr[-2000:]}")
    runs = []
    for line in proc.stdout.splitlines():
        res = json.loads(line)
        if not res.pop("samples_equal_our_loader"):
            raise RuntimeError(f"{res['id']}: faster_whisper.decode_audio differs from specwhisper.audio.load_audio")
        print(f"[fixtures]   {res['id']} {res['options']}: {len(res['segments'])} segments, "
              f"{res['seconds']:.1f} s", file=sys.stderr)
        runs.append({"id": res["id"], "clip": rel[res["id"]], "options": res["options"],
                     "duration": res["duration"], "fw_seconds": round(res["seconds"], 2),
                     "segments": res["segments"]})
    return runs


def make_fw_chunk_length(root: Path, tmp: Path, out: Path, model_dir: Path, versions: dict) -> Path:
    """The facade fixture's call with ``chunk_length`` (``FW_CHUNK_LENGTHS``) on ``FW_CHUNK_CLIPS``,
    greedy only (``temperature=0.0``: a sampled fallback would not be reproducible); jfk also with
    word timings, the read clip without timestamps and longform.flac with clip_timestamps, at the
    first length."""
    clips = [next(c for c in load_set(name, root) if c.id == cid) for name, cid in FW_CHUNK_CLIPS]
    jobs = []
    for clip in clips:
        npy = str(_save_npy(clip, tmp))
        for length in FW_CHUNK_LENGTHS:
            jobs.append({"id": clip.id, "path": str(clip.path), "npy": npy, "word_timestamps": False,
                         "options": {"chunk_length": length, "temperature": 0.0}})
        extra = {"jfk": {"word_timestamps": True}, "1040-133433-0000": {"without_timestamps": True},
                 "longform": {"clip_timestamps": "5,37,60,75"}}.get(clip.id)
        if extra is not None:
            jobs.append({"id": clip.id, "path": str(clip.path), "npy": npy,
                         "word_timestamps": extra.pop("word_timestamps", False),
                         "options": {"chunk_length": FW_CHUNK_LENGTHS[0], "temperature": 0.0, **extra}})
    print(f"[fixtures] fw chunk_length: {len(jobs)} runs in the peer environment", file=sys.stderr)
    runs = _facade_runs(model_dir, jobs, {c.id: c.rel for c in clips}, "chunk_length")
    result = {"faster_whisper": versions["faster_whisper"], "ctranslate2": versions["ctranslate2"],
              "call": FW_FACADE_CALL[:-1] + ", chunk_length=L, temperature=0.0, ...)",
              "model_dir_name": model_dir.name, "cpu_vendor": cpu_vendor(), "kernel_class": kernel_class(),
              "note": "as fw_facade_*.json (faster-whisper's defaults otherwise), each run's extra options in "
                      "'options'. faster-whisper 1.2.1's FeatureExtractor keeps a call's chunk_length for later "
                      "calls: the peer resets it after each run, so each run is a fresh model's.",
              "runs": runs}
    return atomic_write_text(out / f"fw_chunk_length_{kernel_class()}.json",
                             json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def hallucination_input(root: Path) -> np.ndarray:
    """jfk, 25 s of a 100 Hz hum with noise (seeded), LJ050-0131: over the hum tiny.en's window
    holds an anomalous segment that ``hallucination_silence_threshold`` cuts."""
    clips = {c.id: c for c in load_set("real", root)}
    first, last = load_audio(clips["jfk"].path), load_audio(clips["ljspeech_LJ050-0131"].path)
    t = np.arange(16000 * 25) / 16000
    hum = 0.05 * np.sin(2 * np.pi * 100 * t) + 0.01 * np.random.default_rng(1).standard_normal(t.size)
    return np.concatenate([first, hum.astype(np.float32), last]).astype(np.float32)


HALLUCINATION_THRESHOLDS = (None, 1.0, 2.0)


def make_fw_hallucination(root: Path, tmp: Path, out: Path, model_dir: Path, versions: dict) -> Path:
    """faster-whisper's segments and words of ``hallucination_input`` with tiny.en, greedy, word
    timings, at each of ``HALLUCINATION_THRESHOLDS`` (None: the rule off)."""
    npy = tmp / "hallucination.npy"
    np.save(npy, hallucination_input(root))
    jobs = [{"id": f"threshold-{t}", "path": None, "npy": str(npy), "word_timestamps": True,
             "options": {} if t is None else {"hallucination_silence_threshold": t}}
            for t in HALLUCINATION_THRESHOLDS]
    proc = subprocess.run([str(ensure_peer_venv()), "-c", _FACADE_PEER], capture_output=True, text=True,
                          input=json.dumps({"model": str(model_dir), "threads": 2, "clips": jobs}),
                          env=_peer_env(), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"faster-whisper hallucination run failed:\n{proc.stderr[-2000:]}")
    runs = [json.loads(line) for line in proc.stdout.splitlines()]
    for run in runs:
        run.pop("samples_equal_our_loader")
    result = {"faster_whisper": versions["faster_whisper"], "ctranslate2": versions["ctranslate2"],
              "call": "WhisperModel(tiny.en, device='cpu', compute_type='int8', cpu_threads=2).transcribe("
                      "samples, language='en', beam_size=1, vad_filter=False, word_timestamps=True, "
                      "hallucination_silence_threshold=T)", "input": "benchmarks.make_oracle_fixtures."
              "hallucination_input", "model_dir_name": model_dir.name, "kernel_class": kernel_class(), "runs": runs}
    return atomic_write_text(out / f"fw_hallucination_{kernel_class()}.json",
                             json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def _peer_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # never let the fork's ctranslate2 leak into the peer
    return env


def _model(arg: str | None, name: str) -> Path:
    if arg:
        return Path(arg)
    from specwhisper.model_store import resolve_model

    return resolve_model(name)


def _base_int8() -> Path:
    from specwhisper.model_store import resolve_model

    return resolve_model("base", prefer_int8=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.make_oracle_fixtures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="CT2 directory of the multilingual base model (default: model store)")
    ap.add_argument("--tiny", help="CT2 directory of tiny.en (default: model store)")
    ap.add_argument("--data", help="shared corpus root (default: ../shared/data)")
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures"))
    ap.add_argument("--base-int8", help="CT2 int8 directory of base for the facade fixture (default: model store)")
    ap.add_argument("--only", choices=("mel", "greedy", "facade", "hallucination", "chunk"),
                    help="write one of the fixtures")
    args = ap.parse_args(argv)
    root = shared_data_root(args.data)
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="sw-oracle-") as t, PeerWorker() as worker:
        tmp = Path(t)
        (versions,) = worker.run_all({"op": "versions"})
        if args.only in (None, "mel"):
            print(f"[fixtures] wrote {make_mel_oracle(worker, root, tmp, out, versions)}", file=sys.stderr)
        if args.only in (None, "greedy"):
            models = {"base": _model(args.base, "base"), "tiny.en": _model(args.tiny, "tiny.en")}
            print(f"[fixtures] wrote {make_fw_greedy(worker, root, tmp, out, models, versions)}", file=sys.stderr)
        if args.only in (None, "facade"):
            model_dir = Path(args.base_int8) if args.base_int8 else _base_int8()
            print(f"[fixtures] wrote {make_fw_facade(root, tmp, out, model_dir, versions)}", file=sys.stderr)
        if args.only in (None, "hallucination"):
            tiny = _model(args.tiny, "tiny.en")
            print(f"[fixtures] wrote {make_fw_hallucination(root, tmp, out, tiny, versions)}", file=sys.stderr)
        if args.only in (None, "chunk"):
            model_dir = Path(args.base_int8) if args.base_int8 else _base_int8()
            print(f"[fixtures] wrote {make_fw_chunk_length(root, tmp, out, model_dir, versions)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
