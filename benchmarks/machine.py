"""What a result needs to be comparable: the machine, the package versions, the command line."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import datetime, timezone
from importlib import metadata

from specwhisper.cpu_identity import cpu_flags, cpu_identity, cpu_vendor

__all__ = ["command_line", "cpu_vendor", "kernel_class", "machine_info", "now_iso", "versions"]


def kernel_class() -> str:
    """Vendor and vector ISA the int8 kernels run with, e.g. ``AuthenticAMD-avx512``: what a
    peer's near-tie tokens depend on. ``ONEDNN_MAX_CPU_ISA`` below AVX-512 counts as ``avx2``
    (it holds oneDNN, which CTranslate2 uses on AMD CPUs, to those kernels)."""
    flags = cpu_flags()
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    avx512 = "avx512bw" in flags and not (limit and not limit.startswith("AVX512") and limit != "ALL")
    return f"{cpu_vendor()}-{'avx512' if avx512 else 'avx2'}"


def _mem_total_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_identity(), "cores_visible": os.cpu_count(), "cores_usable": usable,
            "memory_gb": _mem_total_gb(), "os": platform.platform(), "python": sys.version.split()[0]}


def versions() -> dict:
    out = {name: _version(name) for name in ("specwhisper", "ctranslate2-crisperwhisper", "ctranslate2", "numpy",
                                              "jiwer", "whisper-normalizer", "matplotlib")}
    try:
        import ctranslate2

        out["ctranslate2_module"] = ctranslate2.__version__
    except ImportError:
        pass
    return {k: v for k, v in out.items() if v is not None}


def command_line(argv: list[str] | None = None) -> str:
    args = sys.argv[1:] if argv is None else argv
    return "python -m benchmarks " + " ".join(shlex.quote(a) for a in args)


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
