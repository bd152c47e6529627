"""Speculation never changes the text: any drafter, any K, same numerics -> same tokens.

The oracle is the engine's own loop with nothing drafted, in the same numerics. Adversarial
drafters (random ids, out-of-vocabulary ids, early EOT, the greedy continuation with one token
flipped, drafts longer than the remaining length, every K from 1 to 16) may cost speed only.
"""

from __future__ import annotations

import pytest

from adversarial import EarlyEot, Oracle, OutOfVocabulary, RandomIds, Repeater
from clips import representative
from decoding import decode, encode_clip


def _adversaries(engine, reference, seed):
    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    return {
        "random": RandomIds(seed, vocab),
        "oov": OutOfVocabulary(vocab),
        "early_eot": EarlyEot(eot),
        "flip": Oracle(reference, eot, flip=True, seed=seed),
        "overlong": Oracle(reference, eot, overlong=True),
        "repeat": Repeater(),
    }


def _check_clip(engine, clip, seed, exhaustive=False):
    """Oracle vs adversaries on one clip: every (adversary, K) pair when exhaustive, else three
    that rotate with the seed, so that six clips in a row run all 18 (adversary, K) pairs."""
    enc, _ = encode_clip(engine, clip["path"])
    oracle, _ = decode(engine, enc, "batch-invariant")
    cases = [(name, k) for name in _adversaries(engine, oracle, seed) for k in (1, 5, 16)]
    if not exhaustive:
        cases = cases[seed % 6::6]  # seed % 3 took random, early_eot and overlong only, never the other three
    for name, k in cases:
        drafter = _adversaries(engine, oracle, seed)[name]
        tokens, stats = decode(engine, enc, "batch-invariant", drafter, k=k, filler=engine.guesser)
        assert tokens == oracle, f"{clip['audio']}: drafter {name} K={k} changed the output"
    return enc, oracle


def test_selftest_finds_invariant_floor(base_engine):
    # The fixture's engine measured it (a fresh clone has no cache); measuring again cost CI 20 s.
    result = base_engine.lm.selftest()
    assert result.row_floor is not None, result.max_abs_diff_by_rows
    assert base_engine.row_floor == result.row_floor


def test_the_late_position_sweep_runs_once_at_the_full_length(tiny_engine, monkeypatch, tmp_path):
    """The self-test's sweep of the fork's kernels to the last decoder position (calls of every
    size, after no previous text and after 330 tokens of it) is measured once per machine and row
    range, on a full 30 s window, and every encoder length's self-test reuses it (``--audio-ctx``
    sizes check their own length on the first positions only): a second call, here or in a new
    process, decodes nothing."""
    from specwhisper import model_limits, selftest

    lm = tiny_engine.lm
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    monkeypatch.setattr(lm, "_swept", {})
    runner, frames = lm._selftest_runner, []

    def spy(encoder_frames, model, **options):
        frames.append(encoder_frames)
        return runner(encoder_frames, model, **options)

    monkeypatch.setattr(lm, "_selftest_runner", spy)
    first = lm._sweeps(3, 8, use_cache=True)
    assert frames and set(frames) == {model_limits.FULL_ENCODER_FRAMES} and len(frames) <= len(selftest._SWEEP_LEADS)
    assert any(k.startswith(f"after 0 prompt tokens to position {model_limits.MAX_POSITIONS - 1}") for k in first), first
    measured = len(frames)
    monkeypatch.setattr(lm, "_swept", {})  # as a new process: from the cache file
    assert lm._sweeps(3, 8, use_cache=True) == first and len(frames) == measured
    assert lm._sweeps(3, 8, use_cache=False) == first and len(frames) == 2 * measured  # measured again


def test_a_sweep_that_parts_late_narrows_the_row_range(tiny_engine, monkeypatch):
    """Where calls of floor..17 rows agree on the first positions but part late in the window (tiny.en
    int8_float16 on an H200's cuBLAS: 0.77 at ceilings 17, 12 and 8, none at 3), the self-test keeps
    the widest narrower range whose sweep holds, and gives speculation up only where even
    floor..floor + 1 parts."""
    lm, asked = tiny_engine.lm, []

    def sweeps(low, high, use_cache, parts_above):
        asked.append(high)
        return {f"sweep {low}..{high}": 0.0547 if high > parts_above else 0.0}

    diffs: dict = {}
    monkeypatch.setattr(lm, "_sweeps", lambda low, high, use_cache: sweeps(low, high, use_cache, 8))
    assert lm._swept_range(2, 17, diffs, use_cache=True) == (2, 8) and asked == [17, 12, 8]
    assert diffs == {"sweep 2..17": 0.0547, "sweep 2..12": 0.0547, "sweep 2..8": 0.0}
    asked.clear()
    monkeypatch.setattr(lm, "_sweeps", lambda low, high, use_cache: sweeps(low, high, use_cache, 0))
    assert lm._swept_range(2, 17, {}, use_cache=True) == (None, None) and asked == [17, 12, 8, 3]
    asked.clear()
    assert lm._swept_range(3, 12, {}, use_cache=True) == (None, None) and asked == [12, 8, 4]
    asked.clear()  # where the invariant decoder would take over: the range as measured, or nothing
    assert lm._swept_range(2, 17, {}, use_cache=True, narrow=False) == (None, None) and asked == [17]


# Every third representative clip in the README's run (8 of 25, not tiny's nine: the seeds still run
# all 18 adversary/K pairs, each on a clip or more); all of them with -m full.
@pytest.mark.parametrize("part", [slice(1, None, 3), pytest.param(slice(None), marks=pytest.mark.full)],
                         ids=["third", "all"])
def test_adversarial_drafters_never_change_tokens_base(base_engine, shared_data, part):
    for seed, clip in enumerate(representative(shared_data)[part]):
        _check_clip(base_engine, clip, seed)


def test_every_k_and_perfect_drafts_base(base_engine, shared_data):
    clip = next(c for c in representative(shared_data) if c.get("id") == "jfk")
    enc, oracle = _check_clip(base_engine, clip, 0, exhaustive=True)
    eot = base_engine.tokenizer.special.eot
    for k in range(1, 17):
        tokens, stats = decode(base_engine, enc, "batch-invariant", Oracle(oracle, eot, flip=True, seed=k), k=k)
        assert tokens == oracle, f"K={k}"
    tokens, stats = decode(base_engine, enc, "batch-invariant", Oracle(oracle, eot), k=8)
    assert tokens == oracle
    # A perfect drafter confirms K tokens per call: far fewer decoder calls than tokens.
    assert stats.verify_calls <= len(oracle) // 4 + 2
    assert stats.acceptance_rate > 0.9


def test_drafts_past_the_token_limit_stop_where_greedy_stops(base_engine, shared_data):
    """Max-length overruns: with the window's token limit inside the text (and at its end, where
    EOT no longer fits), drafts longer than the room left are cut, and the tokens are greedy's up
    to the limit, whatever was drafted."""
    clip = next(c for c in representative(shared_data) if c.get("id") == "jfk")
    enc, _ = encode_clip(base_engine, clip["path"])
    full, _ = decode(base_engine, enc, "batch-invariant")
    eot = base_engine.tokenizer.special.eot
    for limit in (2, 5, len(full) // 2, len(full)):
        oracle, _ = decode(base_engine, enc, "batch-invariant", max_new=limit)
        assert oracle == full[:limit]
        for name, drafter in {**_adversaries(base_engine, full, limit), "perfect": Oracle(full, eot)}.items():
            tokens, _ = decode(base_engine, enc, "batch-invariant", drafter, k=16, filler=base_engine.guesser,
                               max_new=limit)
            assert tokens == oracle, f"limit {limit}: drafter {name} K=16 changed the output"


def test_adversarial_drafters_tiny(tiny_engine, shared_data):
    for seed, clip in enumerate(representative(shared_data)[::3]):
        _check_clip(tiny_engine, clip, seed)


@pytest.mark.full  # float32 is not the default compute type: its self-test and graphs cost CI 25 s
def test_float32_invariant_range_and_exactness(base_model_dir, shared_data):
    """float32 has its own invariant row range on this machine; speculation stays exact inside it."""
    from specwhisper import WhisperEngine
    from specwhisper.policy import VerifyCost

    # The fork's decoder is tested: no float32 encoder graphs, thread choice, cost table or race
    # against the invariant decoder to measure (about 30 s in a fresh cache). Where the fork's
    # float32 rows are not bitwise alike (AVX2 only: 1e-5 apart), the invariant decoder's float32 graph.
    options = dict(compute_type="float32", threads=2, prompt_lookup=False, encoder="ct2", decoder_threads=2,
                   verify_cost=VerifyCost.default())
    engine = WhisperEngine(base_model_dir, batch_decoder="ct2", **options)
    if engine.row_floor is None:  # (the Xeon's MKL float32 rows part at late positions too)
        engine = WhisperEngine(base_model_dir, batch_decoder="invariant", **options)
    result = engine.lm.selftest()
    assert result.row_floor is not None and result.row_ceiling >= result.row_floor + 1
    for seed, clip in enumerate(representative(shared_data)[:2]):
        _check_clip(engine, clip, seed)


def test_drafters_sure_of_wrong_drafts_never_change_tokens(base_engine, shared_data):
    """A drafter that claims certainty (as the token map does when it recalls a command) is
    verified past the policy's K, in the widest calls priced: sure of a flipped token, of random
    ids, of more tokens than asked, or rating its drafts with numbers that are not probabilities,
    it changes no token against no speculation in the same numerics, through the engine's own
    policy (not a fixed K)."""
    from adversarial import SureOfIt
    from specwhisper import WhisperEngine

    eot, vocab = base_engine.tokenizer.special.eot, base_engine.lm.vocab_size
    for seed, clip in enumerate(representative(shared_data)[:2]):
        oracle = base_engine.transcribe(clip["path"], language="en", numerics="batch-invariant", speculation=False)
        reference = [t for w in oracle.windows for t in w.tokens]
        for mode in ("flip", "random", "overlong", "odd"):
            drafter = SureOfIt(reference, eot, vocab, mode, seed)
            engine = WhisperEngine(loaded=base_engine.lm, prompt_lookup=False, drafters=[drafter])
            result = engine.transcribe(clip["path"], language="en", numerics="batch-invariant")
            assert result.tokens == oracle.tokens, f"{clip['id']}: a drafter sure of {mode} drafts changed the output"
            assert drafter.asked == engine.policy.k_max  # asked as far as the widest call, past K
            assert result.stats["by_drafter"].get(drafter.name, {}).get("drafted", 0) > 0, mode


class _Faulty:
    """A drafter of a user's own with bugs: ids as a numpy array (its truth value is an error),
    then an exception in ``propose`` from the fourth round on; or no ``end`` at all."""

    name = "faulty"

    def __init__(self) -> None:
        self.rounds = 0

    def begin(self, window) -> None:
        self.rounds = 0

    def propose(self, tokens, k):
        import numpy as np

        self.rounds += 1
        if self.rounds > 3:
            raise KeyError("a bug")
        return np.asarray(tokens[-k:], dtype=np.int64)  # repeats itself: mostly wrong, sometimes right

    def observe(self, n_accepted) -> None:
        pass

    def end(self, tokens) -> None:
        pass


def test_a_drafter_of_ones_own_is_checked_and_its_bugs_cost_no_text(tiny_engine, shared_data):
    """``WhisperEngine(drafters=...)``: a wrong argument is an OptionError before the model loads
    (it was an AttributeError or a TypeError at the first window); a drafter that returns a numpy
    array or raises mid-window is dropped with a warning and the tokens are the oracle's."""
    from specwhisper import OptionError, WhisperEngine

    for bad, said in (("faulty", "a list of drafters"), (_Faulty(), "a list of drafters"), ([object()], "has no name")):
        with pytest.raises(OptionError, match=said):
            WhisperEngine("no-such-model", drafters=bad)
    path = shared_data / "real/audio/jfk.flac"
    oracle = tiny_engine.transcribe(path, language="en", numerics="batch-invariant", speculation=False)
    engine = WhisperEngine(loaded=tiny_engine.lm, prompt_lookup=False, drafters=[_Faulty()])
    with pytest.warns(UserWarning, match="drafter 'faulty' raised KeyError in propose"):
        result = engine.transcribe(path, language="en", numerics="batch-invariant", draft_len=4)
    assert result.tokens == oracle.tokens and result.stats["by_drafter"].get("faulty", {}).get("drafted", 0) > 0
