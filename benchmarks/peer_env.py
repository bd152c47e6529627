"""The peer environment: a separate virtual environment with faster-whisper and upstream CTranslate2.

Why a separate environment: faster-whisper depends on upstream ``ctranslate2``, which installs
into the same import name as the fork and would overwrite it. So peers run in their own venv
(created here on first use) as a subprocess, ``peer_worker.py``, that speaks JSON lines:
one job per stdin line, one or more result lines per job, the last one ``{"event": "end"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

from specwhisper.errors import SpecWhisperError

# What the peer venv holds. faster-whisper pulls upstream ctranslate2 4.x, tokenizers, av, onnxruntime.
PEER_REQUIREMENTS = ["faster-whisper>=1.0,<2", "ctranslate2>=4,<5"]
WORKER = Path(__file__).with_name("peer_worker.py")
_MARKER = ".specwhisper-peer-ready"


def peer_venv_dir() -> Path:
    """$SPECWHISPER_BENCH_PEER_VENV, else <model cache>/bench-peer-venv."""
    env = os.environ.get("SPECWHISPER_BENCH_PEER_VENV")
    if env:
        return Path(env)
    from specwhisper.model_store import cache_dir

    return cache_dir() / "bench-peer-venv"


def peer_python(root: Path | None = None) -> Path:
    root = root or peer_venv_dir()
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def is_ready(root: Path | None = None) -> bool:
    root = root or peer_venv_dir()
    marker = root / _MARKER
    if not marker.is_file() or not peer_python(root).exists():
        return False
    return marker.read_text(encoding="utf-8").strip() == " ".join(PEER_REQUIREMENTS)


def ensure_peer_venv(root: Path | None = None, *, quiet: bool = False) -> Path:
    """Create the peer venv on first use; return its python. A half-made venv is rebuilt."""
    root = root or peer_venv_dir()
    if is_ready(root):
        return peer_python(root)
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"[bench] creating peer environment in {root} (pip install {' '.join(PEER_REQUIREMENTS)}); "
              "this happens once", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    py = peer_python(root)
    # pip's own lines (about 60, progress bars among them) drowned the run's: its errors are kept
    # for the message below, the rest is not shown
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEER_REQUIREMENTS]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SpecWhisperError("could not install faster-whisper into the peer environment",
                               where=str(root),
                               hint="check network access to PyPI, or skip peer systems with --systems; "
                                    f"pip said: {proc.stderr.strip()[-400:]}")
    (root / _MARKER).write_text(" ".join(PEER_REQUIREMENTS) + "\n", encoding="utf-8")
    return py


class PeerWorker:
    """A running ``peer_worker.py``: send a job, iterate its result lines. Kept alive between clips."""

    def __init__(self, python: Path | None = None, *, env_threads: int | None = None) -> None:
        python = python or ensure_peer_venv()
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # never let the fork's ctranslate2 leak into the peer
        if env_threads is not None:
            env["OMP_NUM_THREADS"] = str(env_threads)
        self.proc = subprocess.Popen([str(python), "-u", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, text=True, env=env, bufsize=1)

    def run(self, job: dict) -> Iterator[dict]:
        """Send one job; yield result lines until its end line. Worker errors come back as SpecWhisperError."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise SpecWhisperError("peer worker exited", where=str(WORKER), hint="see its stderr above") from exc
        for line in self.proc.stdout:
            msg = json.loads(line)
            if msg.get("event") == "end":
                return
            if msg.get("event") == "error":
                raise SpecWhisperError(f"peer worker failed: {msg.get('error')}", where=str(WORKER),
                                       hint=msg.get("traceback", "")[-600:])
            yield msg
        raise SpecWhisperError("peer worker exited before finishing a job", where=str(WORKER),
                               hint="see its stderr above")

    def run_all(self, job: dict) -> list[dict]:
        return list(self.run(job))

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> PeerWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
