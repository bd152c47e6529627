"""The invariant decoder: speculation exact where the fork's kernels are not batch-invariant.

On CPUs without AVX-512 no call size makes the fork's int8 rows bitwise alike (jumps of half a
logit or more). The ONNX Runtime decoder built from the model's own weights computes each row
alone (per-row quantization, attention over the whole cache with a mask), so a token's logits are the same in a
1-row step and at any row of a 17-row call. Checked here three ways: the decoder's logits over
random call patterns on real audio, the engine pinned to it with adversarial drafters, and a
child process whose oneDNN kernels are held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2`` reproduces an
AVX2-only CPU's CTranslate2 numerics on an AVX-512 one), where the engine must choose it by itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adversarial import EarlyEot, Oracle, OutOfVocabulary, RandomIds, check_exact_under_adversaries
from benchmarks.machine import kernel_class
from clips import clips, representative
from decoding import decode, encode_clip
from specwhisper.policy import VerifyCost
from specwhisper.sampling import PositionSampler

pytest.importorskip("onnxruntime", reason="the invariant decoder needs onnxruntime (a core dependency on Linux x86_64)")

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def invariant_engine(base_model_dir):
    from specwhisper import WhisperEngine

    return WhisperEngine(base_model_dir, compute_type="int8", threads=2, prompt_lookup=False,
                         batch_decoder="invariant")


@pytest.fixture(scope="module")
def car_map(base_engine, shared_data, tmp_path_factory):
    from specwhisper.tokenmap import build_token_map

    lines = (shared_data / "domain/car/train.txt").read_text(encoding="utf-8").splitlines()
    return build_token_map(lines, base_engine.tokenizer).save(tmp_path_factory.mktemp("tm") / "car.tmap")


def _logits_by_pattern(decoder, encoder_output, prompt, tokens, chunks):
    state, _ = decoder.prefill(encoder_output, prompt)
    out, i = [], 0
    for c in chunks:
        out.append(np.asarray(decoder.forward_batch(state, tokens[i:i + c]))[0])
        i += c
    return np.concatenate(out)


def _random_patterns(n: int, seed: int, count: int = 4) -> list[list[int]]:
    """``count`` random ways to cut n tokens into calls of 1..17 rows."""
    rng = np.random.default_rng(seed)
    patterns = []
    for _ in range(count):
        chunks, left = [], n
        while left:
            chunks.append(min(left, int(rng.integers(1, 18))))
            left -= chunks[-1]
        patterns.append(chunks)
    return patterns


# float32 (not the default compute type: its graphs cost CI 13 s) with -m full; the row-wise graph
# too (5 s): the README's run sees its rows compared by the self-test that falls back to it below
@pytest.mark.parametrize("precision,graph", [("int8", "paired"), pytest.param("int8", "rowwise", marks=pytest.mark.full),
                                             pytest.param("float32", "paired", marks=pytest.mark.full)])
def test_rows_are_bitwise_alike_in_any_call(precision, graph, base_model_dir, base_engine, shared_data):
    """A token's logits do not depend on the call it is in: 1-row steps vs random calls of 1..17 rows
    (odd ones too: the paired graph's linears pad them to row pairs)."""
    from specwhisper.invariant_decoder import InvariantDecoder
    from specwhisper.model_store import resolve_model

    model_dir = resolve_model("base", prefer_int8=precision == "int8") if precision == "int8" else base_model_dir
    decoder = InvariantDecoder(model_dir, threads=1, precision=precision, graph=graph)
    enc, _ = encode_clip(base_engine, str(shared_data / "real/audio/jfk.flac"))
    prompt = base_engine.tokenizer.sot_sequence("en")
    state, first = decoder.prefill(enc, prompt)
    tokens = [int(np.argmax(first))]
    while tokens[-1] != base_engine.tokenizer.special.eot and len(tokens) < 40:
        tokens.append(decoder.forward_step_greedy(state, tokens[-1]))
    assert "ask not what your country" in base_engine.tokenizer.decode(tokens[:-1])  # a working decoder
    reference = _logits_by_pattern(decoder, enc, prompt, tokens, [1] * len(tokens))
    for chunks in _random_patterns(len(tokens), seed=0):
        assert np.array_equal(_logits_by_pattern(decoder, enc, prompt, tokens, chunks), reference), chunks


def test_rows_do_not_depend_on_the_caches_length(base_engine, shared_data):
    """Caches grow in steps of ``CACHE_STEP`` positions (attention over 64 positions costs less
    than over 448), and a masked position adds exact zeros: a window whose text crosses several
    steps, decoded in random call patterns (so each position is computed over caches of different
    lengths), gives the same bits as full-length caches in 1-row steps."""
    from specwhisper.invariant_decoder import CACHE_STEP, InvariantDecoder, cache_length
    from specwhisper.model_store import resolve_model

    decoder = InvariantDecoder(resolve_model("base", prefer_int8=True), threads=1)
    assert decoder.cache_step == CACHE_STEP == 64
    enc, _ = encode_clip(base_engine, str(shared_data / "real/audio/jfk.flac"))
    tok = base_engine.tokenizer
    earlier = tok.encode(" And so, my fellow Americans, ask not what your country can do for you.") * 8
    prompt = [tok.special.sot_prev] + earlier[:120] + tok.sot_sequence("en")  # the text runs past 128 positions
    state, first = decoder.prefill(enc, prompt)
    assert cache_length(state.feeds) == 128  # the prompt's 124 positions, rounded up to the step
    tokens = [int(np.argmax(first))]
    while tokens[-1] != tok.special.eot and len(tokens) < 60:
        tokens.append(decoder.forward_step_greedy(state, tokens[-1]))
    assert len(prompt) + len(tokens) > 128 and cache_length(state.feeds) == 192
    assert "ask not what your country" in tok.decode(tokens[:-1])
    decoder.cache_step = 448
    reference = _logits_by_pattern(decoder, enc, prompt, tokens, [1] * len(tokens))
    decoder.cache_step = CACHE_STEP
    for chunks in _random_patterns(len(tokens), seed=1):
        assert np.array_equal(_logits_by_pattern(decoder, enc, prompt, tokens, chunks), reference), chunks


def test_calls_write_their_keys_into_the_windows_caches_in_place(base_engine, shared_data):
    """A step's keys and values land in the window's own cache arrays (each bound as the graph's
    input and its output: no copy of the caches a call), where the next call reads them; caches
    grown past their length are bound anew and the binding of the old arrays is dropped."""
    from specwhisper.invariant_decoder import InvariantDecoder, cache_length
    from specwhisper.model_store import resolve_model

    decoder = InvariantDecoder(resolve_model("base", prefer_int8=True), threads=1)
    enc, _ = encode_clip(base_engine, str(shared_data / "real/audio/jfk.flac"))
    prompt = base_engine.tokenizer.sot_sequence("en")
    state, first = decoder.prefill(enc, prompt)
    keys, values = state.feeds["past_k_0"], state.feeds["past_v_0"]
    position = len(prompt)
    assert not keys[0, :, position].any() and not values[0, :, :, position].any()
    token = decoder.forward_step_greedy(state, int(np.argmax(first)))
    assert state.feeds["past_k_0"] is keys and keys[0, :, position].any() and values[0, :, :, position].any()
    assert len(state.feeds.bindings) == 1
    while cache_length(state.feeds) == 64:
        token = decoder.forward_step_greedy(state, token)
    grown = state.feeds["past_k_0"]
    assert grown is not keys and np.array_equal(grown[0, :, :64], keys[0])
    assert len(state.feeds.bindings) == 1 and all(array is state.feeds[name] for name, array
                                                  in next(iter(state.feeds.bindings.values()))[0])


def test_wide_steps_leave_no_thread_spinning_after_them_and_keep_the_one_thread_bits(tiny_model_dir):
    """A step is ~290 small operators: the wide (2-thread) session's pool thread spins between
    them instead of sleeping after each (a step took 1.55x as long woken each time on a KVM Xeon;
    a speed, measured in benchmarks/RESULTS_e2e.md) and must stop when the call returns, so that
    nothing burns the other core after it (the encoder ahead or the next 1-thread call would lose
    it: 44 ms of CPU in the 0.25 s after 36 steps with spinning left on). Its rows are the bits of
    the 1-thread session's."""
    from cpu_use import cpu_of_others

    from specwhisper.invariant_decoder import InvariantDecoder

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no pool thread to spin")
    decoder = InvariantDecoder(tiny_model_dir, threads=1, cross_threads=2)
    rng = np.random.default_rng(5)
    encoder_output = rng.standard_normal((1, 1500, decoder.shape.d_model)).astype(np.float32)
    tokens = [int(t) for t in rng.integers(300, 20000, 40)]
    prompt = [50257, 50362]
    logits = {}
    for wide in (False, True):
        state, _ = decoder.prefill(encoder_output, prompt, wide=lambda wide=wide: wide)
        logits[wide] = [decoder.forward_step(state, t) for t in tokens[:4]]
        rest = []
        during, after = cpu_of_others(lambda state=state, rest=rest: rest.extend(
            decoder.forward_step(state, t) for t in tokens[4:]))
        logits[wide] += rest
        if wide:
            assert during > 0.0, "the wide steps ran on one thread"
            assert after < 0.02, f"{after * 1000:.0f} ms of CPU beside the caller after its wide steps returned"
    assert all(np.array_equal(a, b) for a, b in zip(logits[False], logits[True]))


def test_self_test_keeps_full_length_caches_where_rows_change_with_the_length(tiny_model_dir, monkeypatch,
                                                                            tmp_path):
    """Where a row's bits change with the cache's length (here: grown caches filled with NaN
    instead of zeros, which the mask no longer hides from the values' products), the self-test's
    sweep finds it and keeps the caches full-length: the decoder stays exact, at its old price."""
    import specwhisper.invariant_decoder as inv
    from specwhisper import WhisperEngine

    grow = inv.grow_caches

    def grow_into_nan(feeds, needed, step, limit):
        have = inv.cache_length(feeds)
        grow(feeds, needed, step, limit)
        for name, value in feeds.items():
            if name.startswith("past_k_"):
                value[:, :, have:] = np.nan
            elif name.startswith("past_v_"):
                value[..., have:] = np.nan

    monkeypatch.setattr(inv, "grow_caches", grow_into_nan)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    engine = WhisperEngine(tiny_model_dir, compute_type="int8", threads=2, batch_decoder="invariant", selftest=False,
                           encoder="ct2", decoder_threads=2)
    result = engine.lm.selftest(use_cache=False)
    swept = {k: v for k, v in result.max_abs_diff_by_rows.items() if k.startswith("caches grown")}
    assert swept and any(not d == 0.0 for d in swept.values()), result.max_abs_diff_by_rows
    assert result.row_floor == 1 and result.cache_step == 0 and "full-length caches" in result.contract
    assert engine.lm.invariant_decoder().cache_step == 448


def test_self_test_falls_back_to_the_rowwise_graph_where_pairs_are_not_invariant(tiny_model_dir, monkeypatch,
                                                                                  tmp_path):
    """The paired graph's rows are invariant only as row pairs (with AVX-512 VNNI its kernels
    compute a lone last row another way; their AVX2 kernels do not). Where its rows differ by the
    call (here made to: each row moved by its call's row count, as no machine's kernels would hide)
    the self-test must see that, take the row-wise graph, record it, and a later load must build
    that graph from the cache (that the padded pairs hold is asserted of the invariant engine's own
    self-test below)."""
    from specwhisper import WhisperEngine
    from specwhisper.onnx_build import GraphBuilder

    def by_call_size(self, x, *args):
        rows = self.op("Cast", [self.op("Shape", [x], start=0, end=1)], to=1)  # to float
        return self.op("Add", [exact(self, x, *args), self.op("Mul", [rows, self.const(np.array([1e-3], np.float32))])])

    exact = GraphBuilder.paired_qlinear
    monkeypatch.setattr(GraphBuilder, "paired_qlinear", by_call_size)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "machine"))
    # (a cache of its own: nothing else to measure in it than the self-test)
    pinned = dict(compute_type="int8", threads=2, batch_decoder="invariant", encoder="ct2", decoder_threads=2,
                  verify_cost=VerifyCost.default())
    engine = WhisperEngine(tiny_model_dir, selftest=False, **pinned)  # measured once, below (twice cost CI 9 s)
    result = engine.lm.selftest(use_cache=False)
    assert result.row_floor == 1 and result.graph == "rowwise", result
    assert engine.lm.invariant_decoder().graph == "rowwise"
    monkeypatch.setattr(GraphBuilder, "paired_qlinear", exact)
    again = WhisperEngine(tiny_model_dir, **pinned)
    assert again.lm.selftest().graph == "rowwise" and again.lm.invariant_decoder().graph == "rowwise"


def test_self_test_refuses_an_invariant_graph_whose_logits_are_wrong(tiny_model_dir, monkeypatch, tmp_path):
    """A kernel that computes wrong values the same way in every call pattern passes a comparison
    of rows (ONNX Runtime 1.23 computed NaN for 8-bit blocks over 256, which it did catch). A paired
    graph whose linears compute zeros is refused by the comparison with the float32 model's logits on speech, and
    the row-wise graph, which computes the right ones, is taken."""
    from specwhisper import WhisperEngine
    from specwhisper.onnx_build import GraphBuilder
    from specwhisper.selftest import MAX_INVARIANT_DRIFT

    right = GraphBuilder.paired_qlinear

    def zeros(self, x, weight, scale, bias):
        return self.op("Mul", [right(self, x, weight, scale, bias), self.const(np.zeros(1, np.float32))])

    monkeypatch.setattr(GraphBuilder, "paired_qlinear", zeros)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    engine = WhisperEngine(tiny_model_dir, compute_type="int8", threads=2, batch_decoder="invariant", selftest=False,
                           encoder="ct2", decoder_threads=2)
    result = engine.lm.selftest(use_cache=False)
    assert result.graph == "rowwise" and result.row_floor == 1, result
    assert result.max_abs_diff_by_rows["speech vs float32 (relative)"] <= MAX_INVARIANT_DRIFT


def test_engine_on_the_invariant_decoder_is_exact_with_adversarial_drafters(invariant_engine, shared_data):
    engine = invariant_engine
    assert engine.selftest_result.decoder == "invariant" and engine.row_floor == 1
    assert engine.selftest_result.graph == "paired"  # with the padding, the pairs hold
    assert engine.selftest_result.contract.startswith("bitwise: ONNX Runtime")
    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    for seed, clip in enumerate(representative(shared_data)[:8:2]):
        enc, _ = encode_clip(engine, clip["path"])
        oracle, plain = decode(engine, enc, "batch-invariant")
        assert plain.verify_calls == len(oracle)  # no drafts: one 1-row call a token, no padding
        for name, drafter, k in (("flip", Oracle(oracle, eot, flip=True, seed=seed), 16),
                                 ("random", RandomIds(seed, vocab), 5), ("oov", OutOfVocabulary(vocab), 3),
                                 ("early_eot", EarlyEot(eot), 1), ("perfect", Oracle(oracle, eot), 8)):
            tokens, stats = decode(engine, enc, "batch-invariant", drafter, k=k)
            assert tokens == oracle, f"{clip['audio']}: {name} K={k} changed the output"
        assert stats.verify_calls <= len(oracle) // 4 + 2  # the perfect drafter confirmed 8 a call


def test_decoder_graphs_are_kept_and_a_damaged_file_is_generated_again(tiny_model_dir, tmp_path, monkeypatch):
    """The decoder's graphs are generated once per model and kept: the next load reads them
    (nothing generated) and decodes the same bits; a damaged kept file is generated again."""
    import shutil

    from specwhisper import invariant_graph
    from specwhisper.invariant_decoder import InvariantDecoder
    from specwhisper.tokenizer import WhisperTokenizer

    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "cache"))  # a user's model: kept in the cache
    model = tmp_path / "tiny"
    shutil.copytree(tiny_model_dir, model)
    prompt = WhisperTokenizer.from_model_dir(model).sot_sequence("en")

    def logits(decoder: InvariantDecoder) -> np.ndarray:
        encoder_output = np.random.default_rng(0).standard_normal((1, 1500, decoder.shape.d_model), np.float32)
        state, first = decoder.prefill(encoder_output, prompt)
        return np.concatenate([first.reshape(1, -1), decoder.forward_batch(state, [262, 290, 11])[0]])

    expected = logits(InvariantDecoder(model, threads=1))
    files = invariant_graph.graph_files(model)
    assert all(f.is_file() and tmp_path / "cache" in f.parents for f in files)
    generate = invariant_graph.build_graphs

    def generated_again(*args, **kwargs):
        raise AssertionError("the kept graphs were generated again")

    monkeypatch.setattr(invariant_graph, "build_graphs", generated_again)
    assert np.array_equal(logits(InvariantDecoder(model, threads=1)), expected)
    monkeypatch.setattr(invariant_graph, "build_graphs", generate)
    step = files[1]
    step.write_bytes(step.read_bytes()[:4096])  # cut short
    assert np.array_equal(logits(InvariantDecoder(model, threads=1)), expected)
    assert step.stat().st_size > 1_000_000
    # graphs generated just now that ONNX Runtime refuses: a clear error after one generation, not two
    from specwhisper.errors import ModelError

    for f in files:
        f.unlink()
    builds = []
    monkeypatch.setattr(invariant_graph, "build_graphs", lambda *a, **k: builds.append(1) or generate(*a, **k))
    monkeypatch.setattr("specwhisper.invariant_decoder.cpu_session_options",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("refused (test)")))
    with pytest.raises(ModelError, match="cannot load the decoder graphs"):
        InvariantDecoder(model, threads=1)
    assert len(builds) == 1


def test_engine_results_name_the_contract(invariant_engine, shared_data):
    path = shared_data / "real/audio/jfk.flac"
    spec = invariant_engine.transcribe(path, language="en", numerics="batch-invariant")
    plain = invariant_engine.transcribe(path, language="en", numerics="batch-invariant", speculation=False)
    assert spec.tokens == plain.tokens
    d = spec.to_dict()
    assert d["batch_decoder"] == "invariant" and d["contract"].startswith("bitwise") and d["row_floor"] == 1


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from specwhisper import WhisperEngine
from adversarial import EarlyEot, Oracle, RandomIds
from decoding import decode, encode_clip

from specwhisper.policy import VerifyCost

# The decoder's exactness is tested: no encoder choice, decoder-thread choice or call-cost table to
# measure (the default curve only steers K, and the drafts below set K themselves).
engine = WhisperEngine(sys.argv[2], compute_type="int8", threads=2, prompt_lookup=False, tokenmap=sys.argv[3],
                       encoder="ct2", decoder_threads=1, verify_cost=VerifyCost.default())
eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
st = engine.selftest_result
report = {"floor": engine.row_floor, "decoder": st.decoder, "ct2_failed": st.ct2_diffs is not None,
          "key": engine.lm._selftest_key(), "changed": [], "accepted": 0}
for seed, path in enumerate(sys.argv[5:]):
    enc, _ = encode_clip(engine, path)
    for timestamps in (False, True):
        oracle, _ = decode(engine, enc, "batch-invariant", timestamps=timestamps)
        for name, drafter, k in (("flip", Oracle(oracle, eot, flip=True, seed=seed), 16),
                                 ("random", RandomIds(seed, vocab), 5), ("early_eot", EarlyEot(eot), 1),
                                 ("perfect", Oracle(oracle, eot), 8)):
            tokens, stats = decode(engine, enc, "batch-invariant", drafter, k=k, timestamps=timestamps)
            report["accepted"] += stats.accepted
            if tokens != oracle:
                report["changed"].append(f"{path} timestamps={timestamps}: {name} K={k}")
command = sys.argv[4]
spec = engine.transcribe(command, language="en", numerics="batch-invariant")
plain = engine.transcribe(command, language="en", numerics="batch-invariant", speculation=False)
report["command_equal"] = spec.tokens == plain.tokens
report["command_accepted"] = spec.stats["accepted"]
print("REPORT " + json.dumps(report))
"""


def test_speculation_on_a_cpu_without_avx512_kernels(base_model_dir, base_engine, car_map, shared_data):
    """With CTranslate2's kernels held to AVX2 (oneDNN's on AMD CPUs, MKL's on Intel ones, as on a
    laptop without AVX-512), the fork's rows are not alike (2 vs 3 rows differ by 0.52 with either
    library), the engine picks the invariant decoder by itself, and speculation stays on and exact.
    Kernel settings are part of the numerics: the child's self-test is cached under its own key,
    never this process's. Where this process's kernels are AVX2 ones already (a CPU without
    AVX-512: ``benchmarks.machine.kernel_class``), its own engine shows the same choice and every
    test of the suite runs on them (the child would repeat the suite's exactness checks: 35 s of
    CI on an AVX2-only EPYC)."""
    if kernel_class().endswith("-avx2"):
        st = base_engine.selftest_result
        assert base_engine.row_floor is not None, "speculation is off on this CPU's AVX2 kernels"
        assert st.ct2_diffs is not None and st.decoder == "invariant", st
        return
    picked = [c["path"] for c in representative(shared_data)[:1]]  # jfk (two clips: 15 s more)
    command = clips(shared_data, "car")[2]["path"]
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(TESTS), str(base_model_dir), str(car_map), command,
                           *picked], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))[7:])
    assert report["floor"] is not None, "speculation is off with AVX2 kernels"
    assert report["ct2_failed"] and report["decoder"] == "invariant", report
    assert report["key"] != base_engine.lm._selftest_key(), "the AVX2 run reused this process's self-test key"
    assert report["changed"] == [], report["changed"]
    assert report["accepted"] > 0 and report["command_equal"] and report["command_accepted"] > 0, report


def test_auto_prefers_the_invariant_decoder_only_where_it_is_faster(base_engine, shared_data):
    """``auto`` takes the invariant decoder beside passing fork kernels exactly where its 1-row step
    costs at most ``PREFER_INVARIANT_BELOW`` of theirs; then every ``auto`` window is
    batch-invariant on it, and its text equals speculation off in those numerics."""
    from specwhisper.selftest import PREFER_INVARIANT_BELOW

    result = base_engine.selftest_result
    if result.decoder != "invariant":
        pytest.skip(f"the fork's kernels are chosen here ({result.contract})")
    if not result.preferred:
        pytest.skip("the invariant decoder runs here because the fork's kernels fail, not for speed")
    costs = base_engine.lm.call_costs(result=result)  # cached by the self-test that set ``preferred``
    assert costs is not None and costs[1] <= PREFER_INVARIANT_BELOW
    path = shared_data / "real/audio/jfk.flac"
    auto = base_engine.transcribe(path, language="en")
    assert {w.numerics for w in auto.windows} == {"batch-invariant"} and auto.batch_decoder == "invariant"
    assert "faster than single-row" in auto.windows[0].numerics_reason
    off = base_engine.transcribe(path, language="en", speculation=False)
    assert off.tokens == auto.tokens and off.numerics == "batch-invariant"


def test_auto_drafts_on_the_preferred_invariant_decoder_only_where_drafts_beat_its_steps(invariant_engine,
                                                                                         shared_data, monkeypatch):
    """Where the invariant decoder's 1-row step is the fastest greedy (``preferred``), a draft is not
    free (row floor 1: a 2-row call costs more than a step), so an ``auto`` window drafts only where
    the policy expects drafting to beat plain steps by the margin. Otherwise it decodes 1-row calls
    and its drafters replay it in the shadow, so acceptance keeps being learned and a later window
    drafts again. Tokens equal speculation off in both cases."""
    from dataclasses import replace

    from specwhisper.drafters.prompt_lookup import PromptLookupDrafter
    from specwhisper.policy import default_policy

    engine = invariant_engine
    if engine.row_floor != 1:
        pytest.skip(f"the invariant decoder's row floor is {engine.row_floor} here: drafts up to it are free")
    monkeypatch.setattr(engine, "selftest_result", replace(engine.selftest_result, preferred=True))
    monkeypatch.setattr(engine, "drafters", [PromptLookupDrafter()])
    policy = default_policy(engine.verify_cost, 1, engine.row_ceiling, strong=False)
    monkeypatch.setattr(engine, "policy", policy)
    path = shared_data / "real/audio/jfk.flac"  # "ask not what your country ... ask what you": lookups
    off = engine.transcribe(path, language="en", speculation=False)
    for _ in range(60):  # drafts that were never right
        policy.record(1, 0)
    plain = engine.transcribe(path, language="en")
    assert plain.tokens == off.tokens and plain.numerics == "batch-invariant"
    assert "none drafted" in plain.windows[0].numerics_reason
    assert plain.stats["drafted"] == 0 and {int(rows) for rows in plain.stats["calls_by_rows"]} == {1}
    assert plain.stats["shadow_rounds"] > 0 and plain.stats["shadow_drafted"] > 0  # still learning
    # numerics that auto settled for a batch job are pinned, and drafting is still decided as under auto;
    # numerics pinned by the user draft as asked
    for _ in range(60):
        policy.record(1, 0)
    settled = engine.transcribe(path, language="en", numerics="batch-invariant", numerics_from_auto=True)
    assert settled.tokens == off.tokens and "none drafted" in settled.windows[0].numerics_reason
    assert settled.stats["drafted"] == 0
    pinned = engine.transcribe(path, language="en", numerics="batch-invariant")
    assert pinned.tokens == off.tokens and pinned.stats["drafted"] > 0
    for _ in range(60):  # drafts that were always right
        policy.record(4, 4)
    drafted = engine.transcribe(path, language="en")
    assert drafted.tokens == off.tokens and "none drafted" not in drafted.windows[0].numerics_reason
    assert drafted.stats["drafted"] > 0 and drafted.stats["accepted"] > 0


def test_fork_kernels_pinned_stay_exact(base_model_dir, base_engine, shared_data):
    """``--batch-decoder ct2`` keeps the fork's own kernels (where their self-test passes): the path
    machines whose invariant decoder is slower take under ``auto``."""
    from specwhisper import WhisperEngine

    engine = WhisperEngine(base_model_dir, threads=2, prompt_lookup=False, encoder="ct2",
                           batch_decoder="ct2")
    if engine.row_floor is None:
        pytest.skip("the fork's kernels are not batch-invariant on this CPU")
    assert engine.selftest_result.decoder == "ct2" and not engine.selftest_result.preferred
    # The shared engines decode batch-invariant on the invariant decoder wherever the self-test prefers
    # it (this project's AVX-512 EPYC): there only this test puts the fork's rows under every adversary,
    # with timestamps and with sampling.
    greedy, timed_and_sampled = {}, {"timestamps": True, "sampler": PositionSampler(0.8, 1)}
    for seed, (clip, options) in enumerate(zip(representative(shared_data)[:6:3], (greedy, timed_and_sampled))):
        enc, _ = encode_clip(engine, clip["path"])
        check_exact_under_adversaries(engine, enc, seed, f"{clip['audio']} on the fork's kernels", **options)


def _scored_window(engine, enc, drafter, k: int, record: bool, previous: list[int] = ()):
    """One timestamped window decoded on the invariant decoder with ``drafter``, and its scores,
    recorded while decoding (``record``) or from the scoring pass afterwards; ``previous``: text
    tokens of earlier windows prompted before SOT."""
    from specwhisper.decoder import decode_window
    from specwhisper.drafters.base import WindowContext
    from specwhisper.policy import FixedDraftLength
    from specwhisper.stats import DecodeStats
    from specwhisper.verifier import DecoderSession

    lead = [engine.tokenizer.special.sot_prev, *previous] if previous else []
    prompt = lead + engine.tokenizer.sot_sequence("en", timestamps=True)
    eot = engine.tokenizer.special.eot
    session = DecoderSession(engine.lm, enc, prompt, "batch-invariant", row_floor=1, row_ceiling=engine.row_ceiling,
                             rules=engine.window_decoder.timestamp_rules, scores_from=len(lead) if record else None)
    drafter.begin(WindowContext(prompt=tuple(prompt), eot=eot, max_new_tokens=200))
    tokens = decode_window(session, drafter, FixedDraftLength(k), 200, eot, DecodeStats(), lambda _t: eot)
    return tokens, session.score(tokens, len(lead))


def test_scores_recorded_while_decoding_equal_the_scoring_pass(invariant_engine, shared_data):
    """avg_logprob and no_speech_prob come from the rows decoding already computed (the prefill
    gives SOT's row): bit for bit the scoring pass's values, whatever was drafted."""
    from specwhisper.drafters.base import NullDrafter

    engine = invariant_engine
    eot, vocab = engine.tokenizer.special.eot, engine.lm.vocab_size
    for seed, clip in enumerate(representative(shared_data)[:6:3]):
        enc, _ = encode_clip(engine, clip["path"])
        oracle, (passed, no_speech) = _scored_window(engine, enc, NullDrafter(), 1, record=False)
        assert len(passed) == len(oracle) and all(p <= 0 for p in passed)
        for drafter, k in ((Oracle(oracle, eot, flip=True, seed=seed), 6), (RandomIds(seed, vocab), 4),
                           (Oracle(oracle, eot), 8)):
            tokens, (recorded, recorded_no_speech) = _scored_window(engine, enc, drafter, k, record=True)
            assert tokens == oracle, clip["audio"]
            assert recorded == passed and recorded_no_speech == no_speech, clip["audio"]


def test_a_window_with_previous_text_prefills_in_one_call_and_stays_exact(invariant_engine, shared_data):
    """A window conditioned on earlier text prefills its whole prompt in one call of the window
    graph, whose rows attend as one matrix (not row by row as the step graph's): its first
    token's logits stay as near the float32 model's as the self-test asks of every row, and that
    prompt decoded with adversarial drafters gives the tokens and the scores (recorded while
    decoding, or from the scoring pass, which prefills the prompt again) of no speculation."""
    import ctranslate2

    from specwhisper.backend import to_host
    from specwhisper.drafters.base import NullDrafter
    from specwhisper.selftest import MAX_INVARIANT_DRIFT

    engine = invariant_engine
    eot, vocab, tok = engine.tokenizer.special.eot, engine.lm.vocab_size, engine.tokenizer
    exact = engine.lm._load(engine.lm.threads, "float32")
    picked = representative(shared_data)
    previous = tok.encode(" " + " ".join(c["text"] for c in picked[:12] if c.get("text")))[:150]
    assert len(previous) >= 100
    for seed, clip in enumerate(picked[:6:3]):
        enc, _ = encode_clip(engine, clip["path"])
        prompt = [tok.special.sot_prev, *previous, *tok.sot_sequence("en", timestamps=True)]
        _, first = engine.lm.invariant_decoder().prefill(enc, prompt)
        _, reference = exact.prefill(ctranslate2.StorageView.from_array(np.asarray(to_host(enc), np.float32)), prompt)
        first, reference = np.asarray(first, np.float32).reshape(-1), np.asarray(reference, np.float32).reshape(-1)
        assert first.argmax() == reference.argmax(), clip["audio"]
        assert np.abs(first - reference).max() / np.abs(reference).max() <= MAX_INVARIANT_DRIFT, clip["audio"]
        oracle, (passed, no_speech) = _scored_window(engine, enc, NullDrafter(), 1, record=False, previous=previous)
        assert len(passed) == len(oracle) and all(p <= 0 for p in passed)
        for drafter, k in ((Oracle(oracle, eot, flip=True, seed=seed), 6), (RandomIds(seed, vocab), 4)):
            tokens, (recorded, recorded_no_speech) = _scored_window(engine, enc, drafter, k, record=True,
                                                                    previous=previous)
            assert tokens == oracle, clip["audio"]
            assert recorded == passed and recorded_no_speech == no_speech, clip["audio"]


def _greedy_logits(decoder, enc, prompt, eot: int, n: int = 24) -> tuple[list[int], np.ndarray]:
    """Greedy tokens of one window and the logits of every position (1-row calls)."""
    state, first = decoder.prefill(enc, prompt)
    logits, tokens = [np.asarray(first, np.float32).reshape(-1)], []
    while len(tokens) < n:
        tokens.append(int(np.argmax(logits[-1])))
        if tokens[-1] == eot:
            break
        logits.append(np.asarray(decoder.forward_step(state, tokens[-1]), np.float32).reshape(-1))
    return tokens, np.stack(logits)


def test_lockstep_windows_predict_no_speedup(invariant_engine, shared_data):
    """Windows decoded in a lockstep batch draft nothing, so no speedup is predicted for them (the
    window policy's rate would be a guess about drafts that never run); what they delivered is
    still logged."""
    if not invariant_engine.selftest_result.wide:
        pytest.skip("the invariant decoder's 1- and 2-thread sessions differ here: no lockstep batches")
    result = invariant_engine.transcribe(shared_data / "longform/longform.flac", language="en", timestamps="off",
                                         batch_size=3, numerics="batch-invariant")
    decoded = [w for w in result.windows if w.numerics != "skipped"]
    assert result.stats.get("lockstep") and len(decoded) >= 3
    assert all(w.stats["predicted_speedup"] is None and w.stats["realised_speedup"] > 0 for w in decoded)


def test_lockstep_windows_equal_alone_and_failures_hang_nothing(invariant_engine, shared_data):
    """Windows decoded together at a ``LockstepGate`` get the logits each gets alone, bit for bit,
    in fewer calls; a window whose prompt fails holds no slot; a failed call reaches every window
    that waits on it instead of hanging them, and their slots come free."""
    from concurrent.futures import ThreadPoolExecutor

    from specwhisper.invariant_batch import GatedDecoder, LockstepGate

    engine = invariant_engine
    if not engine.selftest_result.wide:
        pytest.skip("the invariant decoder's 1- and 2-thread sessions differ here: no lockstep batches")
    decoder, prompt, eot = engine.lm.invariant_decoder(), engine.tokenizer.sot_sequence("en"), engine.tokenizer.special.eot
    encs = [encode_clip(engine, c["path"])[0] for c in representative(shared_data)[:3]]
    alone = [_greedy_logits(decoder.widened(), enc, prompt, eot) for enc in encs]
    frames = np.asarray(encs[0]).shape[-2]
    gate = LockstepGate(decoder, 3, frames)

    def gated(enc):
        view = GatedDecoder(gate)
        try:
            return _greedy_logits(view, enc, prompt, eot)
        finally:
            view.release()

    with ThreadPoolExecutor(3) as pool:
        together = [f.result(timeout=300) for f in [pool.submit(gated, enc) for enc in encs]]
    for (tokens, logits), (tokens_alone, logits_alone) in zip(together, alone):
        assert tokens == tokens_alone and np.array_equal(logits, logits_alone)
    assert gate.calls < gate.rows == sum(len(t) - (t[-1] == eot) for t, _ in alone)

    short = GatedDecoder(gate)
    with pytest.raises(ValueError, match="encoder frames"):
        short.prefill(np.asarray(encs[0])[:, :frames // 2], prompt)
    assert sorted(gate._free) == [0, 1, 2] and not gate._active

    views = [GatedDecoder(gate) for _ in range(2)]
    states = [view.prefill(enc, prompt)[0] for view, enc in zip(views, encs)]
    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(views[0].forward_step, states[0], prompt[-1]),
                 pool.submit(views[1].forward_step, states[1], 10 ** 7)]  # out of it: the call fails
        for call in calls:
            with pytest.raises(Exception):  # noqa: B017 (ONNX Runtime's own error type)
                call.result(timeout=120)
    for view in views:
        view.release()
    assert sorted(gate._free) == [0, 1, 2] and not gate._active


def test_doctor_says_whether_the_forks_kernels_passed_or_failed():
    """``doctor`` said "passed the self-test, but the invariant decoder is faster here" whenever
    the invariant decoder was preferred, also where the fork's kernels had failed (on the Xeon,
    1.69 apart at position 447)."""
    from specwhisper.doctor import ct2_verdict
    from specwhisper.selftest import SelfTestResult

    def result(ct2_passed):
        return SelfTestResult(1, 17, False, {}, 1.0, "k", decoder="invariant", preferred=True,
                              ct2_diffs={"to position 447": 1.69}, ct2_passed=ct2_passed)

    assert "failed the self-test" in ct2_verdict(result(False)) and "1.69" in ct2_verdict(result(False))
    assert "passed the self-test, but the invariant decoder is faster" in ct2_verdict(result(True))
    assert "passed" not in ct2_verdict(result(None)) and "failed" not in ct2_verdict(result(None))


def test_a_short_length_starts_with_the_preferred_invariant_decoder(tiny_engine, monkeypatch, tmp_path):
    """Under ``auto``, where the full window's self-test kept the invariant decoder for its price, a
    short encoder length tests it alone (the fork's kernels would decide nothing there); where it
    fails at that length, the fork's kernels are tested and kept if they pass. The decisions are the
    ones the fork-first order makes (each part's outcome is fixed here)."""
    from dataclasses import replace

    from specwhisper.model_limits import FULL_ENCODER_FRAMES
    from specwhisper.selftest import SelfTestResult

    lm = tiny_engine.lm
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    monkeypatch.setattr(lm, "batch_decoder_choice", "auto")
    monkeypatch.setattr(lm, "_invariant_is_faster", lambda invariant: True)
    passing = SelfTestResult(1, 17, False, {}, 1.0, "k", decoder="invariant", graph="paired")
    failing = replace(passing, row_floor=None, row_ceiling=None)
    fork = SelfTestResult(2, 17, False, {"fork": 0.0}, 1.0, "k")
    asked: list[str] = []
    outcome = {"invariant": passing, "ct2": fork}

    def part(decoder, key, encoder_frames, use_cache, measure):
        asked.append(decoder)
        return replace(outcome[decoder], key=key)

    monkeypatch.setattr(lm, "_selftest_part", part)
    for full_preferred in (True, False):
        monkeypatch.setattr(lm, "_selftests", {FULL_ENCODER_FRAMES: replace(passing, preferred=full_preferred)})
        asked.clear()
        result = lm.selftest(encoder_frames=500, use_cache=False)
        assert result.decoder == "invariant" and result.preferred
        assert asked == (["invariant"] if full_preferred else ["ct2", "invariant"])
        assert (result.ct2_diffs is None) == full_preferred
    outcome["invariant"] = failing  # not exact at this length: the fork's kernels are tested, and kept
    monkeypatch.setattr(lm, "_selftests", {FULL_ENCODER_FRAMES: replace(passing, preferred=True)})
    asked.clear()
    result = lm.selftest(encoder_frames=750, use_cache=False)
    assert asked == ["invariant", "ct2"] and result.decoder == "ct2" and result.row_floor == 2
    outcome["ct2"] = replace(fork, row_floor=None, row_ceiling=None)  # neither: no floor, the fork's diffs kept
    asked.clear()
    result = lm.selftest(encoder_frames=1000, use_cache=False)
    assert asked == ["invariant", "ct2"] and result.row_floor is None and result.ct2_diffs == {"fork": 0.0}
    # exact here but not kept for its price at this length (False), or a machine too busy to price it
    # (None: nothing is cached): the fork's kernels are tested and kept where they pass
    outcome.update(invariant=passing, ct2=fork)

    def cached(frames: int) -> bool:
        path = tmp_path / "selftest.json"
        return path.is_file() and any(k.startswith("v10|") and k.endswith(f"|{frames}")
                                      for k in json.loads(path.read_text()))

    for faster, frames in ((None, 300), (False, 400)):
        monkeypatch.setattr(lm, "_invariant_is_faster", lambda invariant, faster=faster: faster)
        asked.clear()
        result = lm.selftest(encoder_frames=frames, use_cache=False)
        assert asked == ["invariant", "ct2"] and result.decoder == "ct2" and result.row_floor == 2
        assert cached(frames) == (faster is not None)
    monkeypatch.setattr(lm, "_invariant_is_faster", lambda invariant: True)
    asked.clear()
    assert lm.selftest(encoder_frames=FULL_ENCODER_FRAMES, use_cache=False).decoder == "invariant"
    assert asked[0] == "ct2"  # the full window itself always starts with the fork's kernels
