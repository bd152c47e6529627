"""Encoder backends behind one small interface: ``encode(features) -> encoder output`` for ``prefill``.

Two backends: the fork's CTranslate2 encoder, and an ONNX Runtime graph generated from the same
model's weights (``encoder_graph``), which ran a 30 s window about twice as fast on this project's
AVX-512 EPYC (1.1-1.3x on the short windows of ``--audio-ctx``).
``auto`` checks the graph against CTranslate2's encoder and times both once per machine, model,
compute type and threads (cached beside the self-test), then keeps the faster (where the graph
is slower it is not even built on later loads). Why a choice and
not a switch: the graph's int8 activations round like CTranslate2's (per row), not bit for bit, so
its tokens are its own numerics (speculation stays exact within it; ``Result.encoder`` says which
ran), and on a CPU without fast int8 the gain may vanish.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import ModelError
from .ort_session import cpu_session_options

ENCODERS = ("auto", "ct2", "onnx")
CHOICE_VERSION = 1  # part of the cached choice's key
# A graph whose output is further from CTranslate2's (mean |difference| over mean |output|) is broken:
# base's per-row int8 graph is at 0.03 of CTranslate2's int8, CTranslate2's own int8 at 0.08 of its float32.
MAX_RELATIVE_DIFF = 0.15


class Encoder(Protocol):
    name: str

    def encode(self, features: np.ndarray):
        """Encoder output for one window's features [n_mels, frames], in a form ``prefill`` takes."""


class CT2Encoder:
    """The fork's own encoder (on the model's device)."""

    name = "ct2"

    def __init__(self, model) -> None:
        self._model = model

    def encode(self, features: np.ndarray):
        import ctranslate2

        view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None], dtype=np.float32))
        return self._model.encode(view, to_cpu=False)


class OnnxEncoder:
    """The model's encoder as an ONNX Runtime graph on the CPU (``threads`` intra-op threads)."""

    name = "onnx"

    def __init__(self, model_dir: Path, precision: str, threads: int) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise ModelError("the ONNX encoder needs onnxruntime", where="--encoder onnx",
                             hint="pip install onnxruntime onnx, or use --encoder ct2") from None
        self.precision = precision
        self.path = graph_path(model_dir, precision)
        if not self.path.is_file():
            _build(model_dir, precision, self.path)
        try:
            self._session = ort.InferenceSession(str(self.path), cpu_session_options(ort, threads),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types; a damaged cached file is rebuilt next time
            self.path.unlink(missing_ok=True)
            raise ModelError(f"ONNX Runtime cannot load the encoder graph: {exc}", where=str(self.path),
                             hint="run again to rebuild it, or use --encoder ct2") from None

    def encode(self, features: np.ndarray):
        import ctranslate2

        features = np.ascontiguousarray(features[None], dtype=np.float32)
        return ctranslate2.StorageView.from_array(self._session.run(None, {"features": features})[0])


def graph_path(model_dir: Path, precision: str) -> Path:
    """Where the generated graph is kept: beside a model of the store, else in the cache (a user's
    own model directory is not written to), named after the model file it was built from."""
    from .encoder_graph import ENCODER_GRAPH_VERSION
    from .model_store import cache_dir, models_dir

    name = f"encoder-{precision}-g{ENCODER_GRAPH_VERSION}.onnx"
    model_dir = model_dir.resolve()
    if models_dir().resolve() in model_dir.parents:
        return model_dir / name
    stat = (model_dir / "model.bin").stat()
    tag = hashlib.sha256(f"{model_dir}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:16]
    return cache_dir() / "encoders" / tag / name


def _build(model_dir: Path, precision: str, path: Path) -> None:
    from .encoder_graph import build_encoder_graph
    from .io_utils import atomic_write_bytes

    atomic_write_bytes(path, build_encoder_graph(model_dir, precision))


def onnx_precision(compute_type: str) -> str | None:
    """The graph precision for a CTranslate2 compute type on the CPU (None: no graph for it)."""
    if compute_type.startswith("int8"):
        return "int8"
    return "float32" if compute_type == "float32" else None


@dataclass(frozen=True)
class EncoderChoice:
    """Which encoder runs and why; the timings (ms per 30 s window) and the graph's distance from
    CTranslate2's output on the bundled sample where they were measured."""

    name: str
    reason: str
    ct2_ms: float | None = None
    onnx_ms: float | None = None
    relative_diff: float | None = None


def choose_encoder(choice: str, *, model, model_dir: Path, device: str, compute_type: str, threads: int,
                   n_mels: int, cache_key: str, use_cache: bool = True) -> tuple[Encoder, EncoderChoice]:
    """The encoder for ``choice`` (auto, ct2, onnx) and the record of how it was chosen.

    ``model``: the loaded CTranslate2 model (its encoder, and the reference for the check).
    Without onnxruntime or on a failed build, ``auto`` runs CTranslate2's encoder with a warning
    saying why; ``onnx`` asked for explicitly is an error then."""
    from .backend import cache_get, cache_put

    if choice not in ENCODERS:
        raise ModelError(f"unknown encoder {choice!r}", where="--encoder", hint=f"use one of {', '.join(ENCODERS)}")
    ct2 = CT2Encoder(model)
    if choice == "ct2":
        return ct2, EncoderChoice("ct2", "asked for")
    precision = onnx_precision(compute_type)
    if device != "cpu" or precision is None:
        why = f"no ONNX encoder for {device} {compute_type}"
        if choice == "onnx":
            raise ModelError(why, where="--encoder onnx", hint="use --encoder ct2 (or auto), or a CPU int8/float32 model")
        return ct2, EncoderChoice("ct2", why)
    key = f"encoder-v{CHOICE_VERSION}|{cache_key}|{_ort_tag()}|{precision}"
    cached = cache_get(key) if use_cache else None
    record = EncoderChoice(**cached) if isinstance(cached, dict) else None
    if choice == "auto" and record is not None and record.ct2_ms is not None and record.onnx_ms is not None \
            and record.ct2_ms <= record.onnx_ms:  # measured slower here: not even built
        return ct2, EncoderChoice("ct2", "the faster here (measured once, cached)", record.ct2_ms, record.onnx_ms,
                                  record.relative_diff)
    try:
        onnx = OnnxEncoder(model_dir, precision, threads)
        if record is None or (choice == "auto" and (record.onnx_ms is None or record.ct2_ms is None)):
            record = _measure(ct2, onnx, n_mels, timed=choice == "auto")
            if record.relative_diff is not None:  # a failed check is not kept: the next load checks again
                cache_put(key, asdict(record))
    except Exception as exc:  # noqa: BLE001 - any failure of the graph (build, disk, ORT) falls back under auto
        what = exc.what if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
        if choice == "onnx":
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"the ONNX encoder failed: {what}", where=str(model_dir),
                             hint="use --encoder ct2 (or auto, which falls back by itself)") from None
        warnings.warn(f"ONNX encoder unavailable, using CTranslate2's: {what}", stacklevel=3)
        return ct2, EncoderChoice("ct2", f"ONNX encoder unavailable: {what}")
    if record.relative_diff is None or record.relative_diff > MAX_RELATIVE_DIFF:
        message = (f"the ONNX encoder failed its check against CTranslate2's on the bundled sample: {record.reason}"
                   if record.relative_diff is None else
                   f"the ONNX encoder's output is {record.relative_diff:.3f} (relative) off CTranslate2's on the "
                   f"bundled sample (limit {MAX_RELATIVE_DIFF})")
        if choice == "onnx":
            raise ModelError(message, where=str(onnx.path), hint="use --encoder ct2 (or auto)")
        warnings.warn(f"{message}: using CTranslate2's encoder", stacklevel=3)
        return ct2, EncoderChoice("ct2", message, record.ct2_ms, record.onnx_ms, record.relative_diff)
    if choice == "onnx":
        return onnx, EncoderChoice("onnx", "asked for", record.ct2_ms, record.onnx_ms, record.relative_diff)
    faster = onnx if record.onnx_ms < record.ct2_ms else ct2
    return faster, EncoderChoice(faster.name, "the faster here (measured once, cached)", record.ct2_ms,
                                 record.onnx_ms, record.relative_diff)


def _measure(ct2: CT2Encoder, onnx: OnnxEncoder, n_mels: int, timed: bool, rounds: int = 3) -> EncoderChoice:
    """The graph's output against CTranslate2's on the bundled sample (a full 30 s window), and
    (``timed``) both encoders timed in turn, ``rounds`` each after a warm-up: medians in ms."""
    from .backend import to_host
    from .features import bundled_sample_window

    features = bundled_sample_window(n_mels)
    reference = to_host(ct2.encode(features))
    output = to_host(onnx.encode(features))
    if output.shape != reference.shape or not np.isfinite(output).all():
        return EncoderChoice("ct2", f"ONNX encoder output of shape {output.shape}, not {reference.shape}, or not finite")
    relative = float(np.abs(output - reference).mean() / max(float(np.abs(reference).mean()), 1e-12))
    if not timed:
        return EncoderChoice("onnx", "checked", relative_diff=round(relative, 5))
    seconds: dict[str, list[float]] = {"ct2": [], "onnx": []}
    for _ in range(rounds):
        for encoder in (ct2, onnx):
            t0 = time.perf_counter()
            to_host(encoder.encode(features))
            seconds[encoder.name].append(time.perf_counter() - t0)
    ct2_ms, onnx_ms = (1000.0 * float(np.median(seconds[n])) for n in ("ct2", "onnx"))
    return EncoderChoice("onnx" if onnx_ms < ct2_ms else "ct2", "measured", round(ct2_ms, 1), round(onnx_ms, 1),
                         round(relative, 5))


def _ort_tag() -> str:
    from .encoder_graph import ENCODER_GRAPH_VERSION
    from .onnx_build import ort_tag

    return ort_tag(f"e{ENCODER_GRAPH_VERSION}")
