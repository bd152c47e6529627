"""Peer worker: runs faster-whisper and upstream CTranslate2 inside the peer virtual environment.

Run by ``peer_env.PeerWorker`` with the peer venv's python; it must import nothing from this
project (the fork's ``ctranslate2`` lives elsewhere). Protocol: one JSON job per stdin line; for
each job one or more JSON result lines on stdout, ended by ``{"event": "end"}``, or a single
``{"event": "error", ...}`` line instead. Audio arrives as float32 16 kHz ``.npy`` files written
by the parent, so every system sees the very same samples.

Jobs:
  {"op": "versions"}
  {"op": "mel", "clips": [{"id", "npy", "out", "n_mels", "extra_frames", "max_frames"}]}
  {"op": "transcribe", "system": "fw-greedy"|"fw-default"|"ct2-greedy", "model", "device",
   "compute_type", "threads", "npy", "language", "prompt" (ct2-greedy: SOT sequence ids)}
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback

import numpy as np

N_FRAMES = 3000  # 30 s of 10 ms frames: one encoder window

# The exact faster-whisper options of each system (also written into results and fixtures).
FW_GREEDY = {"beam_size": 1, "temperature": 0.0, "without_timestamps": True, "vad_filter": False,
             "condition_on_previous_text": False}  # without_timestamps: False for audio over 30 s
FW_DEFAULT: dict = {}  # faster-whisper's own defaults: beam 5, temperature fallback, timestamps
CT2_GREEDY = {"beam_size": 1, "max_length": 448, "suppress_blank": True, "suppress_tokens": [-1]}

_models: dict = {}
_audio: dict = {}


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _rss() -> dict:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    current_mb = None
    try:
        with open("/proc/self/statm") as f:
            current_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        pass
    return {"rss_mb": current_mb, "peak_rss_mb": peak_mb}


def versions() -> dict:
    import ctranslate2
    import faster_whisper

    return {"faster_whisper": faster_whisper.__version__, "ctranslate2": ctranslate2.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0]}


def _load_audio(path: str) -> np.ndarray:
    if path not in _audio:
        _audio.clear()
        _audio[path] = np.load(path).astype(np.float32, copy=False)
    return _audio[path]


class _TimedFeatures:
    """Stands in for ``model.feature_extractor`` and adds up the time spent computing features."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds = 0.0

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.inner(*args, **kwargs)
        self.seconds += time.perf_counter() - t0
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _model(job: dict):
    from faster_whisper import WhisperModel

    key = (job["model"], job.get("device", "cpu"), job.get("compute_type", "int8"), int(job.get("threads", 2)))
    if key not in _models:
        t0 = time.perf_counter()
        model = WhisperModel(key[0], device=key[1], compute_type=key[2], cpu_threads=key[3], num_workers=1)
        load_s = time.perf_counter() - t0
        model.feature_extractor = _TimedFeatures(model.feature_extractor)
        encode = model.encode
        model._encoder_s = 0.0

        def timed_encode(features, _encode=encode, _model=model):
            t = time.perf_counter()
            out = _encode(features)
            _model._encoder_s += time.perf_counter() - t
            return out

        model.encode = timed_encode
        _models[key] = (model, load_s)
    return _models[key]


def _fw_transcribe(job: dict, options: dict) -> dict:
    model, load_s = _model(job)
    audio = _load_audio(job["npy"])
    model.feature_extractor.seconds = 0.0
    model._encoder_s = 0.0
    t0 = time.perf_counter()
    segments, info = model.transcribe(audio, language=job.get("language"), **options)
    segments = list(segments)  # the generator does the work
    total = time.perf_counter() - t0
    features_s, encoder_s = model.feature_extractor.seconds, model._encoder_s
    return {
        "text": "".join(s.text for s in segments).strip(),
        "tokens": [t for s in segments for t in s.tokens],
        "segments": [{"start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
                      "temperature": s.temperature} for s in segments],
        "language": info.language,
        "timings": {"load_s": load_s, "features_s": features_s, "encoder_s": encoder_s,
                    "decoder_s": max(total - features_s - encoder_s, 0.0), "total_s": total},
        "options": options,
    }


def _ct2_greedy(job: dict) -> dict:
    """Upstream CT2 ``generate`` greedy over fixed 30 s windows, features from faster-whisper."""
    from faster_whisper.audio import pad_or_trim

    model, load_s = _model(job)
    audio = _load_audio(job["npy"])
    prompt = [int(t) for t in job["prompt"]]
    t0 = time.perf_counter()
    features = model.feature_extractor.inner(audio)
    t1 = time.perf_counter()
    content = features.shape[-1] - 1
    tokens: list[int] = []
    encoder_s = decoder_s = 0.0
    for seek in range(0, max(content, 1), N_FRAMES):
        segment = pad_or_trim(features[:, seek:min(seek + N_FRAMES, content)])
        ta = time.perf_counter()
        encoded = model.model.encode(_storage(segment[None]), to_cpu=False)
        tb = time.perf_counter()
        result = model.model.generate(encoded, [prompt], **CT2_GREEDY)[0]
        tc = time.perf_counter()
        encoder_s += tb - ta
        decoder_s += tc - tb
        tokens.extend(int(t) for t in result.sequences_ids[0])
    total = time.perf_counter() - t0
    eot = model.hf_tokenizer.token_to_id("<|endoftext|>")
    text_tokens = [t for t in tokens if t < eot]
    return {
        "text": model.hf_tokenizer.decode(text_tokens).strip(),
        "tokens": tokens,
        "timings": {"load_s": load_s, "features_s": t1 - t0, "encoder_s": encoder_s, "decoder_s": decoder_s,
                    "total_s": total},
        "options": CT2_GREEDY,
    }


def _storage(array: np.ndarray):
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(array, dtype=np.float32))


def transcribe(job: dict) -> dict:
    system = job["system"]
    if system == "fw-greedy":  # timestamps (and seeking) beyond one window, as our engine's default
        long_audio = _load_audio(job["npy"]).size > N_FRAMES * 160
        out = _fw_transcribe(job, {**FW_GREEDY, "without_timestamps": not long_audio})
    elif system == "fw-default":
        out = _fw_transcribe(job, FW_DEFAULT)
    elif system == "ct2-greedy":
        out = _ct2_greedy(job)
    else:
        raise ValueError(f"unknown peer system {system!r}")
    out.update(_rss())
    out["system"] = system
    return out


def mel(clip: dict) -> dict:
    """faster-whisper's features as its encoder sees them (first window), cut to the audio + padding."""
    from faster_whisper.audio import decode_audio, pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = _load_audio(clip["npy"])
    extractor = FeatureExtractor(feature_size=int(clip["n_mels"]))
    features = extractor(audio)  # default padding=160 samples of zeros appended, chunk_length=None
    content = features.shape[-1] - 1  # faster-whisper drops the last frame: content_frames = shape - 1
    window = pad_or_trim(features[:, :min(content, N_FRAMES)])  # zero-pads in the log-mel domain to 3000
    keep = min(content, N_FRAMES) + int(clip.get("extra_frames", 50))
    if clip.get("max_frames"):
        keep = min(keep, int(clip["max_frames"]))
    out = np.ascontiguousarray(window[:, :keep], dtype=np.float32)
    np.save(clip["out"], out)
    info = {"id": clip["id"], "shape": list(out.shape), "content_frames": int(content),
            "raw_frames": int(features.shape[-1])}
    if clip.get("path"):  # cross-check: faster-whisper's own decoder on the original file
        decoded = decode_audio(clip["path"], sampling_rate=16000)
        info["decode_audio_samples"] = int(decoded.size)
        if decoded.size == audio.size:
            info["decode_audio_max_abs_diff"] = float(np.max(np.abs(decoded - audio))) if audio.size else 0.0
    return info


def handle(job: dict) -> None:
    op = job.get("op")
    if op == "versions":
        _emit(versions())
    elif op == "mel":
        for clip in job["clips"]:
            _emit(mel(clip))
    elif op == "transcribe":
        _emit(transcribe(job))
    elif op == "unload":
        _models.clear()
        _emit({"unloaded": True})
    else:
        raise ValueError(f"unknown op {op!r}")


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            handle(json.loads(line))
        except Exception as exc:  # report and keep serving: one bad clip must not end the run
            _emit({"event": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            continue
        _emit({"event": "end"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
