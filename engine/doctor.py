"""``specwhisper doctor``: what this machine and build can do, in one screen."""

from __future__ import annotations

import json
import os
import platform
import sys

from . import __version__, model_store


def run_doctor(model: str | None, compute_type: str, threads: int, batch_decoder: str = "auto",
               encoder: str = "auto") -> int:
    from .backend import _import_ct2, step_api_available
    from .cores import default_threads, max_threads, usable_cores
    from .cpu_identity import cpu_identity
    from .measure_cache import kernel_env

    ctranslate2 = _import_ct2()
    print(f"specwhisper {__version__} on Python {sys.version.split()[0]}, {platform.platform()}")
    print(f"ctranslate2 {ctranslate2.__version__} at {ctranslate2.__file__}")
    step = step_api_available()
    print(f"step API (prefill/forward_step/forward_batch): {'yes' if step else 'NO: speculative decoding unavailable'}")
    print(f"CPU compute types: {sorted(ctranslate2.get_supported_compute_types('cpu'))}")
    n_cuda = ctranslate2.get_cuda_device_count()
    try:
        cuda_types = sorted(ctranslate2.get_supported_compute_types("cuda")) if n_cuda else []
    except (RuntimeError, ValueError):
        cuda_types = []
    build = "a CUDA build" if cuda_types else ("no CUDA device seen" if not n_cuda else "no CUDA support in this build")
    print(f"CUDA devices: {n_cuda} ({build}{': ' + ', '.join(cuda_types) if cuda_types else ''})")
    print(f"cores this process may use: {usable_cores()} of the machine's {os.cpu_count()} (affinity, cgroup "
          f"quota); threads default to {default_threads(4)} on the command line (the cores, up to 4) and "
          f"{default_threads()} in Python (up to 2), and take at most {max_threads()} (twice the cores)")
    print(f"CPU (as measurements are keyed): {cpu_identity()}")
    print(f"kernel settings (part of the numerics; read once per process): {kernel_env()}")
    print(f"encoder backends: {_graph_backends_line()}")
    print(f"model cache: {model_store.models_dir()} ({_cache_state(model_store.models_dir())})")
    for entry in model_store.list_models():
        print(f"  {entry['name']:<8} {'cached' if entry['pulled'] else 'not pulled'}")
    if model is not None and step:
        from .backend import LoadedModel

        lm = LoadedModel(model_store.resolve_model(model, prefer_int8=compute_type.startswith("int8")),
                         compute_type=compute_type, threads=threads, batch_decoder=batch_decoder,
                         encoder=encoder)
        choice = lm.encoder_choice
        timings = ("; " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in choice.ms.items()) + " per 30 s window"
                   if choice.ms else "")
        drift = "".join(f"; {name} output off ct2's by {diff:.3f} (relative)"
                        for name, diff in choice.relative_diff.items())
        print(f"encoder: {choice.name} ({choice.reason}{timings}{drift})")
        result = lm.selftest(use_cache=False)
        verdict = (f"rows {result.row_floor}..{result.row_ceiling} (every call of that many rows is bitwise invariant)"
                   if result.row_floor else "FAILED: speculation off")
        print(f"speculation contract: {result.contract}")
        if result.ct2_diffs:
            print(ct2_verdict(result))
        print(f"decoder threads: {lm.decoder_threads} (encoder {threads}; 1 unless {threads} is clearly faster, measured)")
        print(f"batch-invariance self-test ({lm.compute_type}, decoder {lm.decoder_threads} threads): {verdict}; "
              f"1-row steps {'match' if result.single_row_matches else 'differ (single-row is its own numerics)'}; "
              f"{result.seconds:.2f} s")
        print(json.dumps(result.max_abs_diff_by_rows, indent=1))
    return 0


def ct2_verdict(result) -> str:
    """The line on the fork's own kernels where the invariant decoder was chosen over them: they
    passed and it is faster, or they failed (it said "passed" whenever it was faster, also where
    they had failed at the last position)."""
    # (a result cached before ``ct2_passed`` was recorded does not say which)
    verdict = {True: "passed the self-test, but the invariant decoder is faster here",
               False: "failed the self-test here"}.get(result.ct2_passed, "were tested too")
    return (f"CTranslate2's own kernels {verdict} (largest |logit| differences by call pattern): "
            + json.dumps({k: round(v, 6) for k, v in result.ct2_diffs.items()}))


def _cache_state(folder) -> str:
    """Whether the model cache can be written, probed as a pull would (a temporary file in it or
    in the nearest folder above that exists): a read-only image or a full disk otherwise shows
    first as a failed pull, or as measurements made again at every start."""
    from pathlib import Path

    from .io_utils import probe_folder
    from .measure_cache import writable_measurement_cache

    existing = next(p for p in (Path(folder), *Path(folder).parents) if p.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is a file")
        probe_folder(existing)
    except OSError as exc:
        kept = writable_measurement_cache()
        where = f"kept in {kept}" if kept else "measured again at every start"
        return (f"CANNOT BE WRITTEN ({exc.strerror or exc}): models cannot be pulled into it; this machine's "
                f"measurements are {where}; point SPECWHISPER_CACHE at a writable folder to pull")
    return "writable"


def _graph_backends_line() -> str:
    """Which graph encoders can run here, and a hint where OpenVINO would likely pay: a CPU with
    bfloat16 dot products (its encoder ran 1.2-1.3x faster than ONNX Runtime's on such a CPU)."""
    from .encoders import _installed

    have = [name for name in ("onnxruntime", "openvino") if _installed(name)]
    line = f"{', '.join(have) or 'none'} installed"
    if not _cpu_has_bf16():
        return line + "; this CPU has no bfloat16 dot products (AVX512_BF16, AMX): OpenVINO would compute in float32"
    line += "; this CPU multiplies bfloat16 in hardware"
    if "openvino" not in have:
        line += ": pip install 'specwhisper[openvino]' for the OpenVINO encoder (--encoder auto then times it too)"
    return line


def _cpu_has_bf16() -> bool:
    from .cpu_identity import cpu_flags

    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
