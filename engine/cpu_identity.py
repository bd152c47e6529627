"""What this CPU is, as far as the kernels that decide a measurement are concerned: its model name
and the SIMD extensions that CTranslate2 (oneDNN, MKL), ONNX Runtime (MLAS) and OpenVINO dispatch on.

Why not the model name alone: virtual machines often report a bare family name. This project's
AVX2-only cloud EPYC says "AMD EPYC", a name that says nothing of AVX-512; on an AVX-512 EPYC the
fork's int8 rows are bitwise invariant from 2 rows, on the AVX2-only one at no row count. A
measurement cache carried from one to the other (a shared home folder, an image built on another
host) would have decoded batch-invariant windows with a row floor that does not hold there: tokens
that speculation changes. The extensions in the key keep such measurements apart.
"""

from __future__ import annotations

import functools
import platform

# Extensions whose presence selects other kernels (or other rounding) in the libraries the engine
# runs; the rest of /proc/cpuinfo's flags (virtualisation, security, power) do not.
_KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                 "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_int8", "amx_bf16", "amx_tile")
CPUINFO = "/proc/cpuinfo"


@functools.cache
def _cpuinfo() -> tuple[str, str, frozenset[str]]:
    """The first processor's model name, vendor and flags from ``CPUINFO`` (Linux); elsewhere the
    platform's processor name, its machine type and no flags."""
    fields = {"model name": platform.processor() or platform.machine(), "vendor_id": platform.machine(), "flags": ""}
    try:
        with open(CPUINFO, encoding="utf-8") as fh:
            for line in fh:
                if line.strip() == "":  # the first processor's block is enough
                    break
                field, sep, value = line.partition(":")
                if sep and field.strip() in fields:
                    fields[field.strip()] = value.strip()
    except OSError:
        pass
    return fields["model name"], fields["vendor_id"], frozenset(fields["flags"].split())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo cannot be read)."""
    return _cpuinfo()[2]


def cpu_vendor() -> str:
    """``GenuineIntel``, ``AuthenticAMD``, ... (int8 kernels, and so near-tie tokens, differ by vendor)."""
    return _cpuinfo()[1]


def cpu_identity() -> str:
    """Model name and kernel-relevant extensions, e.g. ``AMD EPYC [avx,avx2,f16c,fma]``: part of
    every measurement's cache key (no ``|`` in it: the keys' separator)."""
    name, _, flags = _cpuinfo()
    isa = ",".join(sorted(f for f in _KERNEL_FLAGS if f in flags))
    return f"{name} [{isa}]".replace("|", "/")
