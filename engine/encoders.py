"""Encoder backends behind one small interface: ``encode(features) -> encoder output`` for ``prefill``.

Three backends: the fork's CTranslate2 encoder; an ONNX Runtime graph generated from the same
model's weights (``encoder_graph``), which ran a 30 s window about twice as fast on this project's
AVX-512 EPYC (1.1-1.3x on the short windows of ``--audio-ctx``); and, where the optional
``openvino`` package is installed, a graph of the same weights run by OpenVINO, in bfloat16 where the
CPU has it (a further 1.2-1.3x at a 30 s window on that EPYC).
``auto`` checks each graph against CTranslate2's encoder and times them once per machine, model,
compute type, threads and library versions (cached beside the self-test), then keeps the fastest
(graphs slower than CTranslate2's are not even built on later loads). Why a choice and not a
switch: no graph rounds bit for bit as CTranslate2 does, so its tokens are its own numerics
(speculation stays exact within it; ``Result.encoder`` says which ran), and on a CPU without fast
int8 or bfloat16 the gain may vanish.
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import ModelError, OptionError, option_where
from .no_telemetry import import_openvino
from .ort_session import cpu_session_options

ENCODERS = ("auto", "ct2", "onnx", "openvino")
CHOICE_VERSION = 2  # part of the cached choice's key
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
        self.path, source = graph_source(model_dir, precision)
        try:
            self._session = ort.InferenceSession(source, cpu_session_options(ort, threads),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types; a damaged cached file is rebuilt next time
            raise ModelError(f"ONNX Runtime cannot load the encoder graph: {exc}",
                             where=_drop_refused(self.path, model_dir),
                             hint="run again to rebuild it, or use --encoder ct2") from None

    def encode(self, features: np.ndarray):
        import ctranslate2

        features = np.ascontiguousarray(features[None], dtype=np.float32)
        return ctranslate2.StorageView.from_array(self._session.run(None, {"features": features})[0])


class OpenVinoEncoder:
    """The model's encoder through OpenVINO's CPU runtime (an optional extra), from an ONNX graph of
    the model's own weights. Why a third backend: where the CPU multiplies bfloat16 in hardware
    (AVX512_BF16, AMX) OpenVINO runs the attention and the linears (CTranslate2's int8 weight rows,
    decompressed inside its kernels) in bfloat16, about twice the float32 rate ONNX Runtime's
    attention is bound by. Elsewhere it computes in float32 and ``auto`` will rarely pick it."""

    name = "openvino"

    def __init__(self, model_dir: Path, precision: str, threads: int) -> None:
        try:
            ov = import_openvino()
        except ImportError:
            raise ModelError("the OpenVINO encoder needs openvino", where="--encoder openvino",
                             hint="pip install 'specwhisper[openvino]', or use --encoder onnx or ct2") from None
        self.graph = "int8-weights" if precision == "int8" else precision
        self.path, source = graph_source(model_dir, self.graph)
        core = ov.Core()
        bf16 = precision == "int8" and "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        self.inference_precision = "bf16" if bf16 else "f32"
        try:
            compiled = core.compile_model(core.read_model(source), "CPU", {
                "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": self.inference_precision,
                "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False})
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses of its own; a damaged file is rebuilt
            raise ModelError(f"OpenVINO cannot compile the encoder graph: {exc}",
                             where=_drop_refused(self.path, model_dir),
                             hint="run again to rebuild it, or use --encoder onnx or ct2") from None
        self._request = compiled.create_infer_request()
        self._lock = threading.Lock()  # one infer request: a window at a time (a draft model has its own encoder)

    def encode(self, features: np.ndarray):
        import ctranslate2

        with self._lock:
            self._request.infer({0: np.ascontiguousarray(features[None], dtype=np.float32)})
            output = np.array(self._request.get_output_tensor(0).data)  # a copy: the request reuses its buffer
        return ctranslate2.StorageView.from_array(output)


def graph_path(model_dir: Path, precision: str) -> Path:
    """Where the generated encoder graph is kept (``model_store.generated_file``)."""
    from .encoder_graph import ENCODER_GRAPH_VERSION
    from .model_store import generated_file

    return generated_file(model_dir, f"encoder-{precision}-g{ENCODER_GRAPH_VERSION}.onnx")


def graph_source(model_dir: Path, precision: str) -> tuple[Path | None, str | bytes]:
    """``built_graph``'s graph as its file (None where it is kept in memory only) and as what a
    runtime loads (the file's path, or the graph's bytes)."""
    graph = built_graph(model_dir, precision)
    return (graph, str(graph)) if isinstance(graph, Path) else (None, graph)


def _drop_refused(path: Path | None, model_dir: Path) -> str:
    """Delete a kept graph file that the runtime refused (a damaged one is built again on the next
    load); where to say the error was."""
    if path is not None:
        path.unlink(missing_ok=True)
    return str(path or model_dir)


def built_graph(model_dir: Path, precision: str) -> Path | bytes:
    """The graph file of ``precision`` for the model, built now (atomically) where it is not yet;
    where it cannot be written (a read-only store and cache, a full disk), the graph itself, kept
    in memory as the decoder's graphs are: the encoder the machine runs fastest is not passed over
    for want of a writable folder."""
    from .encoder_graph import build_encoder_graph
    from .io_utils import atomic_write_bytes

    path = graph_path(model_dir, precision)
    if path.is_file():
        return path
    graph = build_encoder_graph(model_dir, precision)
    try:
        atomic_write_bytes(path, graph)
    except OSError:
        return graph
    return path


def onnx_precision(compute_type: str) -> str | None:
    """The graph precision for a CTranslate2 compute type on the CPU (None: no graph for it)."""
    if compute_type.startswith("int8"):
        return "int8"
    return "float32" if compute_type == "float32" else None


@dataclass(frozen=True)
class EncoderChoice:
    """Which encoder runs and why; where measured, each backend's fastest ms per 30 s window on the
    bundled sample (``ms``) and each graph backend's distance from CTranslate2's output there
    (``relative_diff``: mean |difference| over mean |output|)."""

    name: str
    reason: str
    ms: dict[str, float] = field(default_factory=dict)
    relative_diff: dict[str, float] = field(default_factory=dict)


GRAPH_BACKENDS = {"onnx": ("ONNX", OnnxEncoder), "openvino": ("OpenVINO", OpenVinoEncoder)}


def choose_encoder(choice: str, *, model, model_dir: Path, device: str, compute_type: str, threads: int,
                   n_mels: int, cache_key: str, use_cache: bool = True) -> tuple[Encoder, EncoderChoice]:
    """The encoder for ``choice`` (auto, ct2, onnx, openvino) and the record of how it was chosen.

    ``model``: the loaded CTranslate2 model (its encoder, and the reference for the check).
    ``auto`` checks every graph backend that is installed against CTranslate2's encoder, times
    those that pass beside it once per machine, model, compute type, threads and library versions
    (cached), and runs the fastest; a backend that fails (not installed, build, check) is passed
    over with a warning saying why. A backend asked for explicitly is an error then."""
    from .measure_cache import cache_get, cache_put, measuring

    if choice not in ENCODERS:
        raise OptionError(f"unknown encoder {choice!r}", where=option_where("encoder"), hint=f"use one of {', '.join(ENCODERS)}")
    ct2 = CT2Encoder(model)
    if choice == "ct2":
        return ct2, EncoderChoice("ct2", "asked for")
    precision = onnx_precision(compute_type)
    if device != "cpu" or precision is None:
        why = f"no ONNX encoder for {device} {compute_type}"
        if choice != "auto":
            raise ModelError(why, where=f"--encoder {choice}", hint="use --encoder ct2 (or auto), or a CPU int8/float32 model")
        return ct2, EncoderChoice("ct2", why)
    if choice != "auto":
        return _explicit(choice, ct2, model_dir, precision, threads, n_mels, cache_key, use_cache)
    backends = [name for name in GRAPH_BACKENDS if name == "onnx" or _installed(name)]
    key = f"encoder-v{CHOICE_VERSION}|{cache_key}|{_library_tag(backends)}|{precision}"
    cached = cache_get(key) if use_cache else None
    if isinstance(cached, dict):
        record = EncoderChoice(**cached)
        if record.name == "ct2":  # measured slower here: the graphs are not even built
            return ct2, EncoderChoice("ct2", "the fastest here (measured once, cached)", record.ms, record.relative_diff)
        try:
            encoder = GRAPH_BACKENDS[record.name][1](model_dir, precision, threads)
            return encoder, EncoderChoice(record.name, "the fastest here (measured once, cached)", record.ms,
                                          record.relative_diff)
        except Exception as exc:  # noqa: BLE001 - a graph that no longer loads: measure again without the cache
            _warn_unavailable(record.name, exc)
    measuring()
    encoders: dict[str, Encoder] = {"ct2": ct2}
    passed_over: list[str] = []
    diffs: dict[str, float] = {}
    from .features import bundled_sample_window

    features = bundled_sample_window(n_mels)  # read and transformed once for the checks and the timing
    reference = _reference(ct2, features)  # also the warm-up of CTranslate2's encoder before it is timed
    for name in backends:
        try:
            encoder = GRAPH_BACKENDS[name][1](model_dir, precision, threads)
            diffs[name] = _check(reference, encoder, features)  # its first run: the warm-up before timing
        except Exception as exc:  # noqa: BLE001 - any failure of a graph (build, disk, runtime, check) passes it over
            passed_over.append(_warn_unavailable(name, exc))
            continue
        if diffs[name] > MAX_RELATIVE_DIFF:
            passed_over.append(_warn_unavailable(name, ModelError(_too_far(name, diffs[name]))))
            continue
        encoders[name] = encoder
    ms = _time(encoders, features)
    fastest = min(ms, key=ms.get)
    record = EncoderChoice(fastest, "measured", ms, diffs)
    if not passed_over and use_cache:  # a failure is not kept: the next load tries again
        cache_put(key, asdict(record))
    kept = "measured once, cached" if not passed_over and use_cache else "measured now, not cached"
    reason = "; ".join([f"the fastest here ({kept})", *passed_over])
    return encoders[fastest], EncoderChoice(fastest, reason, ms, diffs)


def _explicit(name: str, ct2: CT2Encoder, model_dir: Path, precision: str, threads: int, n_mels: int,
              cache_key: str, use_cache: bool) -> tuple[Encoder, EncoderChoice]:
    """A graph backend asked for by name: built and checked against CTranslate2's encoder (the
    check cached), never replaced by another; any failure is an error saying what to do."""
    from .measure_cache import cache_get, cache_put, measuring

    label, cls = GRAPH_BACKENDS[name]
    try:
        encoder = cls(model_dir, precision, threads)
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's own error types
        raise ModelError(f"the {label} encoder failed: {type(exc).__name__}: {exc}", where=str(model_dir),
                         hint="use --encoder ct2 (or auto, which falls back by itself)") from None
    key = f"encoder-check-v{CHOICE_VERSION}|{cache_key}|{_library_tag([name])}|{precision}"
    diff = cache_get(key) if use_cache else None
    if not isinstance(diff, float):
        measuring()
        try:
            from .features import bundled_sample_window

            features = bundled_sample_window(n_mels)
            diff = _check(_reference(ct2, features), encoder, features)
        except ModelError as exc:
            raise ModelError(f"the {label} encoder failed its check against CTranslate2's on the bundled sample: "
                             f"{exc.what}", where=str(model_dir), hint="use --encoder ct2 (or auto)") from None
        if use_cache:
            cache_put(key, diff)
    if diff > MAX_RELATIVE_DIFF:
        raise ModelError(_too_far(name, diff), where=str(getattr(encoder, "path", model_dir)),
                         hint="use --encoder ct2 (or auto)")
    return encoder, EncoderChoice(name, "asked for", relative_diff={name: diff})


def _reference(ct2: CT2Encoder, features: np.ndarray) -> np.ndarray:
    """CTranslate2's encoder output on ``features`` (the bundled sample's 30 s window): what every
    graph is checked against (computed once per choice: base's took 1.3 s a window on an AVX2 EPYC)."""
    from .backend import to_host

    return to_host(ct2.encode(features))


def _check(reference: np.ndarray, encoder: Encoder, features: np.ndarray) -> float:
    """The graph's output on ``features`` against CTranslate2's (``reference``): mean |difference|
    over mean |output|. A wrong shape or a non-finite value is a ModelError."""
    from .backend import to_host

    output = to_host(encoder.encode(features))
    if output.shape != reference.shape or not np.isfinite(output).all():
        raise ModelError(f"output of shape {output.shape}, not {reference.shape}, or not finite", where="encoder check")
    return round(float(np.abs(output - reference).mean() / max(float(np.abs(reference).mean()), 1e-12)), 5)


def _time(encoders: dict[str, Encoder], features: np.ndarray, rounds: int = 2) -> dict[str, float]:
    """Each encoder timed in turn on the bundled sample's 30 s window, ``rounds`` each (each has run
    once already: the check's run is the warm-up): the fastest ms per window. Noise only adds time,
    so the fastest of two runs in turn is as robust to one burst of load as a median of three, and
    the backends measured here are 1.3-2x apart; the choice took 18 s of base's first load on an
    AVX2 EPYC with a separate warm-up and three rounds, 10 s now."""
    from .backend import to_host

    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(rounds):
        for name, encoder in encoders.items():
            t0 = time.perf_counter()
            to_host(encoder.encode(features))
            seconds[name].append(time.perf_counter() - t0)
    return {name: round(1000.0 * min(s), 1) for name, s in seconds.items()}


def _too_far(name: str, diff: float) -> str:
    return (f"the {GRAPH_BACKENDS[name][0]} encoder's output is {diff:.3f} (relative) off CTranslate2's on the "
            f"bundled sample (limit {MAX_RELATIVE_DIFF})")


def _warn_unavailable(name: str, exc: Exception) -> str:
    """One line saying why ``auto`` passes a graph backend over (also returned for the record)."""
    what = exc.what if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
    line = f"{GRAPH_BACKENDS[name][0]} encoder unavailable: {what}"
    warnings.warn(f"{line}; choosing among the others", stacklevel=4)
    return line


def _installed(name: str) -> bool:
    """Whether the optional library of a graph backend can be imported (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken install, or a module blanked in sys.modules
        return False


def _library_tag(backends: list[str]) -> str:
    """The versions that decide what the graphs compute and how fast (cached choices are keyed by them)."""
    from .encoder_graph import ENCODER_GRAPH_VERSION
    from .onnx_build import ort_tag

    tag = ort_tag(f"e{ENCODER_GRAPH_VERSION}")
    if "openvino" in backends:
        from importlib.metadata import PackageNotFoundError, version

        try:
            tag += f"|ov{version('openvino')}"
        except PackageNotFoundError:
            tag += "|ov?"
    return tag
