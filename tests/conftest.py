"""Shared fixtures: real models (through the model store), the shared corpus, loaded engines.

The corpus lives in ../shared/data beside the checkout (or $SPECWHISPER_SHARED_DATA); tests
that need it skip with a clear message when it is absent. Models come from the model store's
cache ($SPECWHISPER_CACHE); $SPECWHISPER_TEST_BASE / $SPECWHISPER_TEST_TINY may point at local
CT2 directories instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    env = os.environ.get("SPECWHISPER_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data", REPO / "shared" / "data"]
    for c in candidates:
        if (c / "README.md").is_file():
            return c
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("shared test corpus not found: expected ../shared/data beside the checkout "
                    "(or set SPECWHISPER_SHARED_DATA)")
    return root


def load_manifest(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for r in rows:
        r["path"] = str(path.parent / r["audio"])
    return rows


def _model_dir(name: str, env: str | None, prefer_int8: bool = False) -> Path:
    override = os.environ.get(env) if env else None
    if override:
        return Path(override)
    from specwhisper.errors import SpecWhisperError
    from specwhisper.model_store import resolve_model

    try:
        return resolve_model(name, prefer_int8=prefer_int8)
    except SpecWhisperError as exc:
        pytest.skip(f"model {name}{' (int8)' if prefer_int8 else ''} unavailable: {exc.what}")


@pytest.fixture(scope="session")
def base_model_dir() -> Path:
    return _model_dir("base", "SPECWHISPER_TEST_BASE")


@pytest.fixture(scope="session")
def base_int8_dir() -> Path:
    """base stored int8, the model faster-whisper's fixtures were made with."""
    return _model_dir("base", None, prefer_int8=True)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return _model_dir("tiny.en", "SPECWHISPER_TEST_TINY")


# The shared engines run the ONNX Runtime encoder: ``auto`` keeps a graph encoder on every CPU
# measured here (AVX2 and AVX-512: 1.7-3x CTranslate2's; OpenVINO's where it is installed and
# faster), and ONNX Runtime's is the one every install has, named so that no test depends on a
# timing; CTranslate2's took about a sixth of the tests' time. The faster-whisper oracle fixtures (made with
# upstream CTranslate2's encoder) hold for CTranslate2's own: test_parity builds those engines itself.
# Engines that tests build themselves take the default (``auto``); tests/test_encoders.py pins it.
@pytest.fixture(scope="session")
def base_engine(base_model_dir):
    from specwhisper import WhisperEngine

    return WhisperEngine(base_model_dir, compute_type="int8", threads=2, prompt_lookup=False, encoder="onnx")


@pytest.fixture(scope="session")
def tiny_engine(tiny_model_dir):
    from specwhisper import WhisperEngine

    return WhisperEngine(tiny_model_dir, compute_type="int8", threads=2, prompt_lookup=False, encoder="onnx")


@pytest.fixture(scope="module")
def torch():
    """torch for the converter tests (the test extra installs it with transformers), on 2 threads."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    torch.set_num_threads(2)
    return torch
