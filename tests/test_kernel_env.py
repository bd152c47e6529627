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

import pytest

from clips import representative

TESTS = Path(__file__).resolve().parent

_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from specwhisper import WhisperEngine
from adversarial import EarlyEot, Oracle, RandomIds
from decoding import decode, encode_clip

engine = WhisperEngine(sys.argv[2], compute_type="int8", threads=2, prompt_lookup=False, encoder="ct2")  # the decoder is tested
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


def test_kernel_settings_in_the_key_and_read_once(base_engine, monkeypatch):
    from specwhisper.measure_cache import kernel_env, kernel_env_from

    assert kernel_env_from({"PATH": "/bin", "CT2_VERBOSE": "1", "MKL_VERBOSE": "1"}) == "-"  # logging only
    assert kernel_env_from({"CT2_USE_MKL": "0", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "HOME": "/"}) \
        == "CT2_USE_MKL=0,MKL_CBWR=AVX2,ONEDNN_MAX_CPU_ISA=AVX2"
    key = base_engine.lm._selftest_key()
    assert key.endswith("|" + kernel_env())
    # CTranslate2 chose its kernels at the first model load: a later change must not rename them.
    monkeypatch.setenv("CT2_USE_MKL", "1" if os.environ.get("CT2_USE_MKL") == "0" else "0")
    assert base_engine.lm._selftest_key() == key


@pytest.mark.full  # the default run covers other kernels through AVX2 ones (test_invariant_decoder.py)
def test_speculation_exact_under_onednn_kernels(base_model_dir, base_engine, shared_data):
    if os.environ.get("CT2_USE_MKL") == "0":
        pytest.skip("this test process already runs oneDNN kernels (CT2_USE_MKL=0): nothing to contrast")
    clips = [c["path"] for c in representative(shared_data)[:2]]
    env = {**os.environ, "CT2_USE_MKL": "0", "CT2_VERBOSE": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(TESTS), str(base_model_dir), *clips],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # CTranslate2 logs its int8 GEMM backend at the first model load: the child must run oneDNN.
    assert "GEMM_S8 backend: DNNL" in proc.stderr, [ln for ln in proc.stderr.splitlines() if "backend" in ln]
    report = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))[7:])
    assert report["floor"] is not None, "no invariant row range under oneDNN kernels"
    assert report["key"] != base_engine.lm._selftest_key(), "the oneDNN run reused this process's self-test key"
    assert report["changed"] == [], report["changed"]


def test_the_cpus_extensions_are_in_the_key(base_engine, tmp_path, monkeypatch):
    """Two CPUs of one model name with other SIMD extensions (a cloud "AMD EPYC" with and without
    AVX-512: the fork's rows invariant from 2 rows on one, at no row count on the other) never
    share a measurement: a cache carried between them would decode with a row floor that does not
    hold."""
    from specwhisper import cpu_identity

    key = base_engine.lm._selftest_key()
    assert key.split("|")[1] == cpu_identity.cpu_identity()
    if Path(cpu_identity.CPUINFO).exists():  # Linux: the flags were read
        assert cpu_identity.cpu_flags() and cpu_identity.cpu_identity().endswith("]")
    block = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
             "flags\t\t: fpu sse2 avx avx2 fma f16c {more}\n\n")
    keys = {}
    for more, isa in (("", "avx,avx2,f16c,fma"),
                      ("avx512f avx512bw avx512vl avx512_vnni vmx", "avx,avx2,avx512_vnni,avx512bw,avx512f,avx512vl,f16c,fma")):
        fake = tmp_path / f"cpuinfo{len(more)}"
        fake.write_text(block.format(n=0, more=more) + block.format(n=1, more="amx_int8"), encoding="utf-8")
        monkeypatch.setattr(cpu_identity, "CPUINFO", str(fake))
        cpu_identity._cpuinfo.cache_clear()
        assert cpu_identity.cpu_identity() == f"AMD EPYC [{isa}]"  # the first processor's; vmx is no kernel's
        assert cpu_identity.cpu_vendor() == "AuthenticAMD"
        keys[isa] = base_engine.lm._selftest_key()
        parts = key.split("|")
        assert keys[isa] == "|".join([parts[0], f"AMD EPYC [{isa}]", *parts[2:]])
    assert len(set(keys.values())) == 2
    monkeypatch.undo()
    cpu_identity._cpuinfo.cache_clear()
    assert base_engine.lm._selftest_key() == key
