"""Token-map drafting inside the engine: exact, effective on domain commands, and learning online."""

from __future__ import annotations

import pytest

from clips import clips
from decoding import AVX2_EPYC_COST
from specwhisper import WhisperEngine
from specwhisper.audio import BUNDLED_SAMPLE, load_audio, speech_seconds
from specwhisper.cli import main
from specwhisper.tokenmap import build_token_map, load_token_map


@pytest.fixture(scope="module")
def car_map(base_engine, shared_data, tmp_path_factory):
    lines = (shared_data / "domain/car/train.txt").read_text(encoding="utf-8").splitlines()
    path = tmp_path_factory.mktemp("tm") / "car.tmap"
    build_token_map(lines, base_engine.tokenizer).save(path)
    return path


@pytest.fixture(scope="module")
def car_engine(base_engine, car_map):
    """On the oracle engine's model (its encoder too): the tokens compared come from one encoder output."""
    return WhisperEngine(loaded=base_engine.lm, tokenmap=car_map, prompt_lookup=False)


def test_token_map_is_exact_and_drafts_on_held_out_commands(car_engine, base_engine, shared_data):
    """Numerics pinned batch-invariant: every window drafts (see the README), so the map's effect on
    calls shows on any machine; whether that is cheaper than plain steps depends on the machine's
    prices and is ``auto``'s decision (next test)."""
    tokens = calls = oracle_calls = 0
    for clip in clips(shared_data, "car")[:6]:
        oracle = base_engine.transcribe(clip["path"], language="en", numerics="batch-invariant", speculation=False)
        spec = car_engine.transcribe(clip["path"], language="en", numerics="batch-invariant")
        assert spec.tokens == oracle.tokens, clip["audio"]
        tokens += spec.stats["tokens"]
        calls += spec.stats["verify_calls"]
        oracle_calls += oracle.stats["verify_calls"]
    # Without drafts a call yields one token; the map makes calls confirm several.
    assert tokens / calls > 1.4
    assert calls < 0.75 * oracle_calls


def test_a_loaded_token_map_is_shared_and_other_types_are_refused(base_engine, car_map, shared_data, tiny_model_dir):
    """A map loaded once drafts in several engines (a TypeError before); other types, and a map of
    another vocabulary, are clear errors."""
    from specwhisper.errors import TokenMapError
    from specwhisper.tokenizer import WhisperTokenizer
    from specwhisper.tokenmap import load_token_map

    tmap = load_token_map(car_map)
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=tmap, prompt_lookup=False)
    clip = clips(shared_data, "car")[0]["path"]
    by_path = WhisperEngine(loaded=base_engine.lm, tokenmap=car_map, prompt_lookup=False)
    kwargs = {"language": "en", "numerics": "batch-invariant"}
    shared, own = engine.transcribe(clip, **kwargs), by_path.transcribe(clip, **kwargs)
    assert shared.tokens == own.tokens and shared.stats["by_drafter"] == own.stats["by_drafter"]
    assert shared.stats["by_drafter"]["tokenmap"]["accepted"] > 0
    for bad in (car_map.read_bytes(), 5):
        with pytest.raises(TokenMapError, match="path to its file or a loaded TokenMap"):
            WhisperEngine(loaded=base_engine.lm, tokenmap=bad)
    if WhisperTokenizer.from_model_dir(tiny_model_dir).fingerprint() != base_engine.tokenizer.fingerprint():
        with pytest.raises(TokenMapError, match="another tokenizer"):
            load_token_map(tmap, WhisperTokenizer.from_model_dir(tiny_model_dir))


def _priced(result, price) -> float:
    """A result's decoder calls after each window's prefill, priced by the engine's measured curve
    (single-row steps at 1.0, the unit the policy predicts in)."""
    return result.stats["steps"] + sum(n * price(int(rows)) for rows, n in result.stats["calls_by_rows"].items())


NEVER_SLOWER_THAN = 0.97  # issue 18: the default policy's speed against plain decoding, at worst


def test_auto_drafts_commands_only_where_drafts_beat_plain_steps(base_engine, car_map, shared_data):
    """By the engine's own prices, what ``auto`` decodes held-out commands with (drafts, plain
    invariant 1-row steps, or single-row greedy) costs no more than the cheapest plain decoding
    this machine has, once its policy has seen them (a first pass: rounds and shadow replays).
    Drafts are not free where the row floor is 1: on the Xeon here they saved 17 % of the
    invariant decoder's 1-row steps on these commands, while on a CI machine whose 1-row step
    cost 0.64 of single-row (against 0.85 here) every-window drafting (pinned numerics) cost 2 %
    more than plain steps. The bound is issue 18's for the default policy: never below 0.97x
    the plain decoding (a fresh-clone run on a slow spell of this VM priced auto 3.5 % above)."""
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=car_map, prompt_lookup=False)
    price = engine.verify_cost
    plain_step = min(1.0, price(1)) if engine.selftest_result and engine.selftest_result.preferred else 1.0
    commands = clips(shared_data, "car")[:6]
    for clip in commands:
        engine.transcribe(clip["path"], language="en")
    cost = plain = 0.0
    for clip in commands:
        result = engine.transcribe(clip["path"], language="en")
        cost += _priced(result, price)
        plain += plain_step * sum(w.stats["tokens"] - 1 for w in result.windows)
    assert cost * NEVER_SLOWER_THAN <= plain + 1e-9, (cost, plain)


def test_first_token_gate_keeps_a_map_that_does_not_fit_single_row(base_model_dir, car_map, base_engine,
                                                                    shared_data):
    """numerics=auto: a window the policy would speculate is decoded single-row when the drafters
    have nothing to say after its first token; what it emits is single-row greedy's. Where
    batch-invariant windows run on the invariant decoder (its prefill is not the fork's), the
    window stays batch-invariant and emits that numerics' greedy tokens."""
    command = WhisperEngine(loaded=base_engine.lm, tokenmap=car_map, prompt_lookup=False).transcribe(
        clips(shared_data, "car")[0]["path"], language="en")
    assert command.windows[0].numerics == "batch-invariant" and command.stats["verify_calls"] > 0
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=car_map, prompt_lookup=False)
    speech = engine.transcribe(shared_data / "real/audio/jfk.flac", language="en")
    window = speech.windows[0]
    expected = "single-row" if engine.selftest_result.decoder == "ct2" else "batch-invariant"
    assert window.numerics == expected, window.numerics_reason
    if expected == "single-row":
        assert "no draft after the first token" in window.numerics_reason
    oracle = base_engine.transcribe(shared_data / "real/audio/jfk.flac", language="en", numerics=expected,
                                    speculation=False)
    assert speech.tokens == oracle.tokens
    pinned = engine.transcribe(shared_data / "real/audio/jfk.flac", language="en", numerics="batch-invariant")
    assert pinned.windows[0].numerics == "batch-invariant"  # a pinned numerics is never gated


def test_first_token_gate_speculates_a_known_start_with_an_open_continuation(base_engine):
    """A first word that begins many of the map's utterances keeps the window batch-invariant even
    where the next word is anyone's guess; a first word no utterance began with does not."""
    from specwhisper.drafters.chain import DrafterChain
    from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter
    from specwhisper.policy import FixedDraftLength, first_token_gate

    tok = base_engine.tokenizer
    lines = [f"Please {w} the {x}." for w in ("open", "close", "find", "play", "stop", "start", "lock", "dim")
             for x in ("door", "window", "garage", "song", "timer", "lights", "gate", "radio")]
    chain = DrafterChain([TokenMapDrafter(build_token_map(lines, tok), tok)])
    gate = first_token_gate(chain, FixedDraftLength(4))
    please, chapter = tok.encode(" Please")[0], tok.encode(" Chapter")[0]
    chain.propose([please], 4)
    assert not chain.last_confidence or chain.last_confidence[0] < 0.5  # the continuation is open
    assert gate([please]) is True and chain.knows_start([please])
    assert gate([chapter]) is False and not chain.knows_start([chapter])


def test_learning_recalls_a_repeated_command(base_model_dir, shared_data):
    engine = WhisperEngine(base_model_dir, threads=2, learn=True, prompt_lookup=False)
    path = clips(shared_data, "car")[3]["path"]
    first = engine.transcribe(path, language="en", numerics="batch-invariant")
    # K pinned at its cap: the cost model's K follows call prices measured on the machine (a busy
    # CI box chose shorter drafts, and 4 calls)
    second = engine.transcribe(path, language="en", numerics="batch-invariant", draft_len=16)
    assert second.tokens == first.tokens
    # The whole utterance is recalled from the prefix memory: one or two calls instead of one per token.
    assert second.stats["verify_calls"] <= 3 < first.stats["verify_calls"]
    # Commands that start alike ("Can you add a stop ...", "Can you call Sarah?"), each recalled by
    # its speech length: the tokens stay those of no-speculation greedy in the same numerics.
    other = clips(shared_data, "car")[2]["path"]
    oracle = {p: engine.transcribe(p, language="en", numerics="batch-invariant", speculation=False).tokens
              for p in (path, other)}
    assert first.tokens == oracle[path]
    for p in (other, path, other):
        assert engine.transcribe(p, language="en", numerics="batch-invariant").tokens == oracle[p]


def test_a_recalled_command_is_verified_in_wide_calls_by_the_default_policy(base_model_dir, shared_data):
    """The default policy's K is learned from every round (short here: the first hearing drafts
    little); a recalled command, sure of every token, is verified past it where wide calls pay
    (base's call prices on an AVX2-only EPYC, pinned: on a 2-core EPYC the learned K was 3 and a
    command said before took a 4-row call every 4 tokens)."""
    from specwhisper.policy import VerifyCost

    cost = VerifyCost(AVX2_EPYC_COST)
    engine = WhisperEngine(base_model_dir, threads=2, learn=True, prompt_lookup=False, verify_cost=cost,
                           batch_decoder="invariant")
    path = clips(shared_data, "car")[3]["path"]
    oracle = engine.transcribe(path, language="en", numerics="batch-invariant", speculation=False).tokens
    first = engine.transcribe(path, language="en", numerics="batch-invariant")  # learned from the oracle's run
    again = engine.transcribe(path, language="en", numerics="batch-invariant")
    assert first.tokens == again.tokens == oracle and len(oracle) >= 10
    assert again.stats["verify_calls"] <= 2 and again.stats["k_sum"] >= len(oracle) - 2, again.stats


def test_cli_learn_save_writes_a_loadable_map(base_model_dir, shared_data, tmp_path, capsys, car_map):
    saved = tmp_path / "learned.tmap"
    paths = [c["path"] for c in clips(shared_data, "smarthome")[:2]]
    rc = main(["transcribe", *paths, "--model", str(base_model_dir), "--threads", "2", "--language", "en",
               "--tokenmap", str(car_map), "--learn", "--learn-save", str(saved), "--stats"])
    err = capsys.readouterr().err
    assert rc == 0 and saved.is_file() and "learned token map" in err
    learned = load_token_map(saved)
    assert learned.stats()["learned"] is True
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_learning_without_speculation_still_learns(tiny_engine, shared_data, tmp_path):
    """``--learn --no-speculation`` (or ``--draft-len 0``, or beam search) learned nothing, yet
    ``--learn-save`` wrote an empty map and said it had saved it: a learning map learns from every
    call (windows decoded together learn in their order too)."""
    engine = WhisperEngine(loaded=tiny_engine.lm, learn=True)  # the loaded model, shared
    first, second, third = (c["path"] for c in clips(shared_data, "car")[:3])
    plain = engine.transcribe(first, language="en", numerics="batch-invariant", speculation=False)
    # the learner never drafts: the call is the oracle's, token for token
    assert plain.stats["drafted"] == 0 and plain.tokens == tiny_engine.transcribe(
        first, language="en", numerics="batch-invariant", speculation=False).tokens
    engine.transcribe(second, language="en", numerics="batch-invariant", draft_len=0)
    engine.transcribe(third, language="en", beam_size=2)  # CTranslate2's own search: nothing drafts, it learns
    assert load_token_map(engine.save_learned(tmp_path / "l.tmap")).stats()["transcripts"] == 3


def test_two_engines_saving_their_learning_into_one_map_keep_both(base_engine, car_map, shared_data, tmp_path):
    """Two processes that loaded one map and save what they learned into it (``--tokenmap m.tmap
    --learn --learn-save m.tmap``): the second save replaced the first's, its learning lost
    without a word. A save into the map's own file that finds it written since it was loaded
    merges into what is there now, under a lock."""
    import shutil

    shared, link = tmp_path / "home.tmap", tmp_path / "current.tmap"
    shutil.copy(car_map, shared)
    link.symlink_to(shared)  # a deployment's "current" map: saves go to the file, the link stays
    static = load_token_map(shared).stats()["transcripts"]
    one, two = (WhisperEngine(loaded=base_engine.lm, tokenmap=path, learn=True, prompt_lookup=False)
                for path in (link, shared))
    first, second = (c["path"] for c in clips(shared_data, "smarthome")[:2])
    one.transcribe(first, language="en", numerics="batch-invariant")
    two.transcribe(second, language="en", numerics="batch-invariant")
    one.save_learned(link)
    two.save_learned(shared)
    assert link.is_symlink() and load_token_map(shared).stats()["transcripts"] == static + 2
    one.save_learned(shared.with_name("elsewhere.tmap"))  # another file: the map as loaded and its own learning
    assert load_token_map(shared.with_name("elsewhere.tmap")).stats()["transcripts"] == static + 1


def test_map_for_another_tokenizer_is_refused(tiny_model_dir, car_map, capsys):
    rc = main(["transcribe", str(BUNDLED_SAMPLE), "--model", str(tiny_model_dir), "--tokenmap", str(car_map)])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "Traceback" not in err


def _replay_matches(engine, replayer, clip_list, numerics):
    """Decode each clip with ``engine`` and replay its tokens; the rounds must agree exactly."""
    eot = engine.tokenizer.special.eot
    drafted = 0
    for clip in clip_list:
        res = engine.transcribe(clip["path"], language="en", numerics=numerics)
        stats = replayer.totals.stats
        before = (stats.verify_calls, stats.accepted, stats.drafted, stats.steps)
        replayer.utterance([t for t in res.tokens if t < eot], speech_seconds(load_audio(clip["path"])))
        replayed = (stats.verify_calls - before[0], stats.accepted - before[1], stats.drafted - before[2],
                    stats.steps - before[3])
        recorded = (res.stats["verify_calls"], res.stats["accepted"], res.stats["drafted"], res.stats["steps"])
        assert replayed == recorded, (clip["audio"], numerics, replayed, recorded)
        drafted += res.stats["drafted"]
    return drafted


@pytest.mark.full  # checks the benchmark's replay, not the engine (19 s of CI)
def test_draft_replay_reproduces_the_engines_rounds(base_model_dir, car_engine, car_map, shared_data):
    """``benchmarks.draft_replay`` runs the engine's loop against an oracle: from a clip's tokens
    alone it must reproduce the engine's verify calls, drafts, accepted drafts and single-row steps
    exactly (batch-invariant, policy-chosen numerics with the first-token gate and shadow drafting,
    and online learning), or its modelled speedups mean nothing."""
    import copy

    from benchmarks.draft_replay import Replayer, make_drafter

    tok = car_engine.tokenizer
    car = clips(shared_data, "car")
    check = car_engine.selftest_result
    settings = {"cost": car_engine.verify_cost, "row_floor": car_engine.row_floor,
                "row_ceiling": car_engine.row_ceiling, "gate": check.decoder == "ct2",
                "preferred": bool(check.preferred and check.row_floor is not None)}
    drafted = 0
    for numerics, clip_list in (("batch-invariant", car[8:12]), ("auto", car[12:16])):
        replayer = Replayer(make_drafter(load_token_map(car_map, tok), tok, "", {}), tok, numerics, **settings)
        replayer.policy = copy.deepcopy(car_engine.policy)  # the engine's policy has learned from earlier calls
        drafted += _replay_matches(car_engine, replayer, clip_list, numerics)
    learner = WhisperEngine(base_model_dir, threads=2, tokenmap=car_map, learn=True, prompt_lookup=False)
    replayer = Replayer(make_drafter(load_token_map(car_map, tok), tok, "static", {}), tok, "auto",
                        learn_filler=True, **settings)
    replayer.policy = copy.deepcopy(learner.policy)
    drafted += _replay_matches(learner, replayer, car[:4] + car[:4], "auto")  # the repeats recall learned text
    assert drafted > 0  # the map drafted: the comparison was not vacuous


def test_replay_ceiling_prices_perfect_drafts():
    """The stream's ceilings: a window whose drafts are all right still pays one call per
    ``row_ceiling`` tokens, each at least ``row_floor`` rows."""
    from benchmarks.draft_replay import perfect_steps
    from specwhisper.policy import VerifyCost

    cost = VerifyCost({1: 1.0, 2: 1.4, 8: 1.8, 12: 2.0})
    assert perfect_steps(0, cost, 2, 12) == 0.0
    assert perfect_steps(1, cost, 2, 12) == cost(2)  # EOT alone: one call at the row floor
    assert perfect_steps(12, cost, 2, 12) == cost(12)
    assert perfect_steps(20, cost, 2, 12) == cost(12) + cost(8)
