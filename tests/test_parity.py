"""Single-row numerics are CT2's own greedy: tokens equal the fork's ``generate(beam_size=1)``,
and text equals faster-whisper's greedy transcript (oracle fixture made in the peer environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clips import representative
from decoding import decode, encode_clip, generate_tokens

FIXTURES = Path(__file__).parent / "fixtures"


def _check_generate_parity(engine, clip):
    enc, _ = encode_clip(engine, clip["path"])
    ours, stats = decode(engine, enc, "single-row")
    assert ours == generate_tokens(engine, enc), clip["audio"]
    # single-row means 1-row steps only (one per token after the first; a window may end at the cap)
    assert stats.verify_calls == 0 and stats.steps == stats.tokens - 1


# Every representative clip once in the README's run (base the even ones, tiny the odd ones);
# every clip on both models with -m full.
@pytest.mark.parametrize("part", [slice(0, None, 2), pytest.param(slice(1, None, 2), marks=pytest.mark.full)],
                         ids=["even", "odd"])
def test_single_row_equals_generate_base(base_engine, shared_data, part):
    for clip in representative(shared_data)[part]:
        _check_generate_parity(base_engine, clip)


@pytest.mark.parametrize("part", [slice(1, None, 2), pytest.param(slice(0, None, 2), marks=pytest.mark.full)],
                         ids=["odd", "even"])
def test_single_row_equals_generate_tiny(tiny_engine, shared_data, part):
    for clip in representative(shared_data)[part]:
        _check_generate_parity(tiny_engine, clip)


def _fw_fixture(kernel: str, vendor: str) -> dict:
    """The faster-whisper fixture made on this kind of CPU (int8 kernels differ at near-ties by vendor
    and vector ISA: jfk gives "Americans, ask" on the Intel Xeon, "Americans ask" from the fork on an
    AMD EPYC), or a skip that says how to make one."""
    path = FIXTURES / f"fw_greedy_{kernel}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    legacy = FIXTURES / "fw_greedy.json"  # made on the Intel Xeon before fixtures were kept per ISA
    if legacy.is_file() and vendor == "GenuineIntel":
        return json.loads(legacy.read_text(encoding="utf-8"))
    pytest.skip(f"no faster-whisper fixture for this CPU ({kernel}): make tests/fixtures/fw_greedy_{kernel}.json "
                "with python -m benchmarks.make_oracle_fixtures --only greedy (test_single_row_equals_generate "
                "still checks parity with the fork's generate)")


@pytest.mark.parametrize("model", ["base", "tiny.en"])
def test_text_equals_faster_whisper_greedy(model, base_model_dir, tiny_model_dir, shared_data):
    """On CTranslate2's own encoder (the fixtures' encoder is upstream CTranslate2's; the shared
    engines run ONNX Runtime's)."""
    from benchmarks.machine import cpu_vendor, kernel_class
    from specwhisper import WhisperEngine

    fixture = _fw_fixture(kernel_class(), cpu_vendor())
    engine = WhisperEngine(base_model_dir if model == "base" else tiny_model_dir, compute_type="int8", threads=2,
                           prompt_lookup=False, encoder="ct2")
    entries = fixture["models"][model]["clips"]
    assert len(entries) == 7, "fixture should hold the 7 real sentence clips"
    for entry in entries:
        result = engine.transcribe(str(shared_data / entry["clip"]), language="en", numerics="single-row")
        assert result.text == entry["text"].strip(), entry["clip"]
        assert result.tokens == entry["tokens"], entry["clip"]


def test_transcribe_real_sentences_reference_quality(base_engine, shared_data):
    """The engine's default path gives reference-quality text on the real sentence clips."""
    from benchmarks.metrics import wer
    from clips import clips

    pairs = []
    for clip in [c for c in clips(shared_data, "real") if c.get("kind") == "sentence"]:
        result = base_engine.transcribe(clip["path"])
        assert result.language == "en"
        pairs.append((result.text, [clip["text"]], "en"))
    assert wer(pairs) < 0.15
