"""CTranslate2's kernel settings are part of the numerics: the self-test is measured per setting.

``CT2_USE_MKL=0`` sends int8 GEMMs on Intel CPUs through oneDNN instead of MKL. Which row counts
give bitwise identical logits then changes (on this project's Xeon: rows 3-17 under MKL, 2-12
under oneDNN), so a self-test cached under one setting must never be reused under the other, and
speculation must stay exact under either. The setting is read once per process, so the oneDNN
side runs in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from clips import representative

TESTS = Path(__file__).resolve().parent

_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from specwhisper import WhisperEngine
from adversarial import EarlyEot, Oracle, RandomIds
from decoding import decode, encode_clip

engine = WhisperEngine(sys.argv[2], compute_type="int8", threads=2, prompt_lookup=False)
eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
report = {"floor": engine.row_floor, "ceiling": engine.row_ceiling, "key": engine.lm._selftest_key(), "changed": []}
for seed, path in enumerate(sys.argv[3:]):
    enc, _ = encode_clip(engine, path)
    oracle, _ = decode(engine, enc, "batch-invariant")
    for name, drafter, k in (("flip", Oracle(oracle, eot, flip=True, seed=seed), 16), ("random", RandomIds(seed, vocab), 5),
                             ("early_eot", EarlyEot(eot), 1), ("perfect", Oracle(oracle, eot), 8)):
        tokens, _ = decode(engine, enc, "batch-invariant", drafter, k=k, filler=engine.guesser)
        if tokens != oracle:
            report["changed"].append(f"{path}: {name} K={k}")
print("REPORT " + json.dumps(report))
"""


def test_selftest_key_tracks_kernel_settings(base_engine, monkeypatch):
    monkeypatch.delenv("CT2_USE_MKL", raising=False)
    monkeypatch.delenv("CT2_VERBOSE", raising=False)
    default = base_engine.lm._selftest_key()
    monkeypatch.setenv("CT2_VERBOSE", "1")  # logging only: same kernels, same key
    assert base_engine.lm._selftest_key() == default
    monkeypatch.setenv("CT2_USE_MKL", "0")
    assert base_engine.lm._selftest_key() != default


def test_speculation_exact_under_onednn_kernels(base_model_dir, base_engine, shared_data):
    clips = [c["path"] for c in representative(shared_data)[:2]]
    env = {**os.environ, "CT2_USE_MKL": "0"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(TESTS), str(base_model_dir), *clips],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))[7:])
    assert report["floor"] is not None, "no invariant row range under oneDNN kernels"
    assert report["key"] != base_engine.lm._selftest_key(), "oneDNN run reused the MKL self-test key"
    assert report["changed"] == [], report["changed"]
