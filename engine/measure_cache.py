"""The cache of what the engine measures on this machine (self-test, call costs, encoder and thread
choice), and the kernel settings its keys name: measured once, read at every later load."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from .errors import warn_caller
from .io_utils import exclusive_lock

# Environment settings that can change which CPU/GPU kernels CTranslate2 runs (``*_VERBOSE`` only log).
_KERNEL_ENV_PREFIXES = ("CT2_", "MKL_", "ONEDNN_", "DNNL_")


def kernel_env_from(environ: Mapping[str, str]) -> str:
    """The kernel-relevant settings of ``environ`` as one stable string ("-" when none)."""
    return ",".join(f"{k}={v}" for k, v in sorted(environ.items())
                    if k.startswith(_KERNEL_ENV_PREFIXES) and not k.endswith("_VERBOSE")) or "-"


@functools.cache
def kernel_env() -> str:
    """Kernel settings of this process, read once when the engine first imports CTranslate2.

    ``CT2_USE_MKL=0`` moves int8 GEMMs on Intel CPUs from MKL to oneDNN: on this project's Xeon
    that changes the row floor from 3 to 2 and the ceiling from 17 to 12, so a cached self-test
    or cost curve is valid only for the settings it was measured under. CTranslate2 reads them
    once per process (at its first model load), so later changes to the environment would name
    kernels that are not running: the snapshot is what the key uses.
    """
    return kernel_env_from(os.environ)


def _selftest_cache_path() -> Path | None:
    if os.environ.get("SPECWHISPER_NO_SELFTEST_CACHE"):
        return None
    from .model_store import cache_dir

    return cache_dir() / "selftest.json"


def _cache_paths() -> list[Path]:
    """Where measurements are read and written: the model cache's file, then, where
    SPECWHISPER_CACHE points elsewhere, the user's own cache folder. A model cache made in
    advance and mounted read-only (an edge device's image) cannot keep what a device measures:
    measured again at every start (about a minute), so the user's cache keeps it instead."""
    primary = _selftest_cache_path()
    if primary is None:
        return []
    from platformdirs import user_cache_dir

    fallback = Path(user_cache_dir("specwhisper")) / "selftest.json"
    return [primary] if fallback == primary else [primary, fallback]


def writable_measurement_cache() -> Path | None:
    """The first of ``_cache_paths`` whose folder takes a file (what ``cache_put`` would write), or
    None where none does or the cache is off (``doctor`` says where measurements go)."""
    from .io_utils import probe_folder

    for cache in _cache_paths():
        try:
            probe_folder(cache.parent)
            return cache
        except OSError:
            continue
    return None


MEASURING_NOTE = ("measuring this machine for this model and its settings (self-test, call costs, encoder and "
                  "thread choice): about 20-60 s, once; later runs read the results")
MEASURING_UNCACHED = ("measuring this machine for this model and its settings (self-test, call costs, encoder and "
                      "thread choice): about 20-60 s, at every load while SPECWHISPER_NO_SELFTEST_CACHE is set")
_measuring_said = threading.Event()


def measuring() -> None:
    """Say, once per process, that a measurement of this machine starts (``specwhisper`` logger,
    INFO; the CLI shows it on a terminal): a first load is otherwise 20-60 s of silence. Called
    where a measurement is about to run, not where a cached one is read."""
    if not _measuring_said.is_set():
        _measuring_said.set()
        note = MEASURING_UNCACHED if _selftest_cache_path() is None else MEASURING_NOTE
        log = logging.getLogger("specwhisper")
        log.info(note)
        if _interactive() and (log.getEffectiveLevel() > logging.INFO or not log.hasHandlers()):
            # nothing shows an INFO note there (a notebook's 76 s of silence looked hung)
            print(f"note: {note}", file=sys.stderr, flush=True)


def _interactive() -> bool:
    """A notebook or a Python prompt: a person watches, and nothing shows the logger's notes."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive) or "ipykernel" in sys.modules


def cache_get(key: str):
    """A value of the self-test cache (None when absent or the cache is off): the model cache's,
    and the user's own only where the model cache cannot be written (where ``cache_put`` keeps
    measurements then). A writable SPECWHISPER_CACHE read the user's folder too, and took the
    measurements of another installation (another venv, another version) without a word."""
    caches = _cache_paths()
    for cache in caches:
        value = _read_cache(cache).get(key)
        if value is not None:
            return value
        if cache is caches[0] and len(caches) > 1 and writable_measurement_cache() == cache:
            return None  # measured here, so read from here only
    return None


_SAID: set[str] = set()  # unwritable caches already warned about


def cache_put(key: str, value) -> None:
    """Add one value. Read, changed and written under a lock on a file beside it: processes that
    measure at once (a batch job's pool) would otherwise each write back what they read, and the
    last one's write would drop what the others had measured, to be measured again next time."""
    failed: list[str] = []
    for cache in _cache_paths():
        try:
            with exclusive_lock(cache.with_suffix(".lock")):
                data = _read_cache(cache)
                data[key] = value
                _write_cache(cache, data)
            return
        except OSError as exc:  # read-only: the next place, and a warning where none can keep it
            failed.append(f"{cache} ({exc.strerror or exc})")
    said = "; ".join(failed)
    if failed and said not in _SAID:  # a cache that cannot be written must not stop transcription; said
        # once a process (a load writes it several times), at the application's line
        _SAID.add(said)
        warn_caller(f"cannot write the self-test cache: {said}: this machine is measured again "
                    "at the next start (point SPECWHISPER_CACHE or XDG_CACHE_HOME at a writable folder)")


def _read_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, data: dict) -> None:
    from .io_utils import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
