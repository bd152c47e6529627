"""Every single-window clip of every shared set, both models (``pytest -m full``, about 35 minutes).

Per clip, one encoder pass serves all checks: single-row tokens equal the fork's ``generate``,
and speculation with adversarial drafters equals the no-speculation oracle in batch-invariant
numerics, greedy and sampled (temperature 0.7, a seed per clip), and with timestamps (one adversary
a clip, in rotation: flipped and overlong oracle, random and out-of-vocabulary ids, a repeater,
early end-of-text). Multi-window files (long-form) go through ``transcribe`` with prompt lookup.
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


@pytest.mark.parametrize("model", ["base", "tiny"])
def test_parity_and_exactness_on_every_clip(model, base_engine, tiny_engine, shared_data):
    engine = base_engine if model == "base" else tiny_engine
    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    failures = []
    for seed, clip in enumerate(every_single_window_clip(shared_data)):
        if not engine.tokenizer.multilingual and clip.get("lang", "en") != "en":
            continue
        enc, _ = encode_clip(engine, clip["path"])
        single, _ = decode(engine, enc, "single-row")
        if single != generate_tokens(engine, enc):
            failures.append(f"{clip['audio']}: single-row != generate")
        oracle, _ = decode(engine, enc, "batch-invariant")
        for drafter, k in ((Oracle(oracle, eot, flip=True, seed=seed), 1 + seed % 16), (RandomIds(seed, vocab), 8),
                           (EarlyEot(eot), 3)):
            tokens, _ = decode(engine, enc, "batch-invariant", drafter, k=k, filler=engine.guesser)
            if tokens != oracle:
                failures.append(f"{clip['audio']}: {type(drafter).__name__} K={k} changed the output")
        sampler = PositionSampler(0.7, seed)  # sampling: the same seed gives the same tokens, drafts or not
        sampled, _ = decode(engine, enc, "batch-invariant", sampler=sampler)
        tokens, _ = decode(engine, enc, "batch-invariant", Oracle(sampled, eot, flip=True, seed=seed),
                           k=1 + (seed * 7) % 16, filler=engine.guesser, sampler=sampler)
        if tokens != sampled:
            failures.append(f"{clip['audio']}: drafts changed the sampled output")
        # with timestamps (their rules run on every row): one adversary a clip, in rotation
        timed, _ = decode(engine, enc, "batch-invariant", timestamps=True)
        adversary = (Oracle(timed, eot, flip=True, seed=seed, overlong=seed % 2 == 0), RandomIds(seed + 1, vocab),
                     Repeater(), EarlyEot(eot))[seed % 4]
        tokens, _ = decode(engine, enc, "batch-invariant", adversary, k=1 + (seed * 5) % 16, filler=engine.guesser,
                           timestamps=True)
        if tokens != timed:
            failures.append(f"{clip['audio']}: {type(adversary).__name__} changed the timestamped output")
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
