"""Every single-window clip of every shared set: base, tiny.en, and base with batch-invariant windows
pinned to the fork's own kernels (``pytest -m full``, about 50 minutes).

Per clip, one encoder pass serves all checks: single-row tokens equal the fork's ``generate``,
and speculation with adversarial drafters equals the no-speculation oracle in batch-invariant
numerics, greedy and sampled (temperature 0.7, a seed per clip), and with timestamps (one adversary
a clip, in rotation: flipped and overlong oracle, random and out-of-vocabulary ids, a repeater,
early end-of-text). base and tiny.en decode batch-invariant windows where the engine's ``auto`` puts
them (the invariant decoder on this project's AVX-512 EPYC; the two took 29 min together here);
``base-fork-kernels`` runs the speculation checks again on the fork's kernels (``batch_decoder="ct2"``,
skipped where they have no row floor) on base's encoder outputs: 18 min run alone here.
Multi-window files (long-form) go through ``transcribe`` with prompt lookup.
The draft model running ahead on its own thread (tiny.en for base) is checked on every English
clip and on the long-form files, where its timing differs from run to run but the tokens must not.
"""

from __future__ import annotations

import pytest

from adversarial import EarlyEot, Oracle, RandomIds, Repeater
from clips import every_single_window_clip
from decoding import decode, encode_clip, generate_tokens
from specwhisper.sampling import PositionSampler

pytestmark = pytest.mark.full

ENGINES = {"base": "base_engine", "tiny": "tiny_engine", "base-fork-kernels": "fork_kernels_engine"}


@pytest.fixture(scope="module")
def fork_kernels_engine(base_model_dir):
    """base with batch-invariant windows on the fork's own kernels (``--batch-decoder ct2``), as in
    ``test_invariant_decoder.py::test_fork_kernels_pinned_stay_exact``. Its own model: an engine
    built on another's (``loaded=``) takes that model's batch decoder."""
    from specwhisper import WhisperEngine

    engine = WhisperEngine(base_model_dir, compute_type="int8", threads=2, prompt_lookup=False, encoder="ct2",
                           batch_decoder="ct2")
    if engine.row_floor is None:
        pytest.skip("the fork's kernels are not batch-invariant on this CPU")
    assert engine.selftest_result.decoder == "ct2" and not engine.selftest_result.preferred
    assert engine.lm.decoder_for("batch-invariant", 1500) is engine.lm.decoder  # what decode() runs on
    return engine


def check_clip(engine, enc, seed: int, name: str, single_row: bool = True) -> list[str]:
    """The every-clip checks on one window's encoder output ``enc``: what failed (empty: all passed)."""
    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    failures = []
    if single_row and decode(engine, enc, "single-row")[0] != generate_tokens(engine, enc):
        failures.append(f"{name}: single-row != generate")
    oracle, _ = decode(engine, enc, "batch-invariant")
    for drafter, k in ((Oracle(oracle, eot, flip=True, seed=seed), 1 + seed % 16), (RandomIds(seed, vocab), 8),
                       (EarlyEot(eot), 3)):
        tokens, _ = decode(engine, enc, "batch-invariant", drafter, k=k, filler=engine.guesser)
        if tokens != oracle:
            failures.append(f"{name}: {type(drafter).__name__} K={k} changed the output")
    sampler = PositionSampler(0.7, seed)  # sampling: the same seed gives the same tokens, drafts or not
    sampled, _ = decode(engine, enc, "batch-invariant", sampler=sampler)
    tokens, _ = decode(engine, enc, "batch-invariant", Oracle(sampled, eot, flip=True, seed=seed),
                       k=1 + (seed * 7) % 16, filler=engine.guesser, sampler=sampler)
    if tokens != sampled:
        failures.append(f"{name}: drafts changed the sampled output")
    # with timestamps (their rules run on every row): one adversary a clip, in rotation
    timed, _ = decode(engine, enc, "batch-invariant", timestamps=True)
    adversary = (Oracle(timed, eot, flip=True, seed=seed, overlong=seed % 2 == 0), RandomIds(seed + 1, vocab),
                 Repeater(), EarlyEot(eot))[seed % 4]
    tokens, _ = decode(engine, enc, "batch-invariant", adversary, k=1 + (seed * 5) % 16, filler=engine.guesser,
                       timestamps=True)
    if tokens != timed:
        failures.append(f"{name}: {type(adversary).__name__} changed the timestamped output")
    return failures


@pytest.mark.parametrize("model", list(ENGINES))
def test_parity_and_exactness_on_every_clip(model, request, shared_data):
    engine = request.getfixturevalue(ENGINES[model])
    pinned = model == "base-fork-kernels"
    # The pinned engine has base's model: base's encoder outputs (cached when base ran first) serve
    # it, as the oracle decodes the same output as the drafted runs; its single-row windows are
    # base's (the fork's 1-row steps either way), so they are not checked twice.
    encoder = request.getfixturevalue("base_engine") if pinned else engine
    failures = []
    for seed, clip in enumerate(every_single_window_clip(shared_data)):
        if not engine.tokenizer.multilingual and clip.get("lang", "en") != "en":
            continue
        enc, _ = encode_clip(encoder, clip["path"])
        failures += check_clip(engine, enc, seed, clip["audio"], single_row=not pinned)
    assert not failures, failures


def test_long_form_exact_with_prompt_lookup(base_model_dir, shared_data):
    from specwhisper import WhisperEngine

    engine = WhisperEngine(base_model_dir, threads=2, prompt_lookup=True)
    for path in sorted((shared_data / "longform").glob("*.flac")):
        for timestamps in ("on", "off"):  # seeking by segment, and fixed 30 s windows
            options = dict(language="en", numerics="batch-invariant", timestamps=timestamps)
            oracle = engine.transcribe(path, speculation=False, **options)
            spec = engine.transcribe(path, **options)
            assert [w.tokens for w in spec.windows] == [w.tokens for w in oracle.windows], (path.name, timestamps)
            assert spec.tokens == oracle.tokens


def test_ahead_draft_model_exact_on_every_clip(base_engine, base_model_dir, tiny_model_dir, shared_data):
    from specwhisper import WhisperEngine
    from specwhisper.drafters.draft_model import DraftModelDrafter

    drafter = DraftModelDrafter(tiny_model_dir, base_engine.tokenizer, ahead=True)
    failures, accepted = [], 0
    try:
        for seed, clip in enumerate(every_single_window_clip(shared_data)):
            if clip.get("lang", "en") != "en":
                continue
            enc, audio = encode_clip(base_engine, clip["path"])
            oracle, _ = decode(base_engine, enc, "batch-invariant")
            drafter.prepare(audio)
            tokens, stats = decode(base_engine, enc, "batch-invariant", drafter, k=1 + seed % 8,
                                   filler=base_engine.guesser, audio=audio)
            accepted += stats.accepted
            if tokens != oracle:
                failures.append(f"{clip['audio']}: ahead draft model K={1 + seed % 8} changed the output")
        assert drafter.ahead.error == ""
    finally:
        drafter.close()
    assert not failures, failures
    assert accepted > 0

    engine = WhisperEngine(base_model_dir, threads=2, prompt_lookup=True, draft_model=tiny_model_dir, draft_ahead=True)
    try:
        for path in sorted((shared_data / "longform").glob("*.flac")):
            options = dict(language="en", numerics="batch-invariant")
            oracle = engine.transcribe(path, speculation=False, **options)
            spec = engine.transcribe(path, **options)
            assert [w.tokens for w in spec.windows] == [w.tokens for w in oracle.windows], path.name
    finally:
        engine.close()
