"""Token maps: the builder, the binary format, the drafter's back-off, prefix memory and online learning."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from specwhisper.cli import main
from specwhisper.decoder import decode_window
from specwhisper.drafters.base import WindowContext
from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter
from specwhisper.errors import TokenMapError
from specwhisper.policy import FixedDraftLength
from specwhisper.stats import DecodeStats
from specwhisper.tokenizer import WhisperTokenizer
from specwhisper.tokenmap import build_token_map, load_token_map
from specwhisper.tokenmap.format import FLAG_LEARNED, HEADER_SIZE, load


@pytest.fixture(scope="module")
def tok(base_model_dir) -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(base_model_dir)


@pytest.fixture(scope="module")
def car_lines(shared_data) -> list[str]:
    return (shared_data / "domain/car/train.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def car_map(tok, car_lines):
    return build_token_map(car_lines, tok)


@pytest.fixture(scope="module")
def car_map_file(car_map, tmp_path_factory) -> Path:
    return car_map.save(tmp_path_factory.mktemp("tmap") / "car.tmap")


def _window(tok: WhisperTokenizer) -> WindowContext:
    return WindowContext(prompt=tuple(tok.sot_sequence("en")), eot=tok.special.eot, max_new_tokens=224)


def _verify_rounds(drafter, ref: list[int], k: int = 16) -> int:
    """Run ``ref`` (text tokens + EOT) through the engine's loop against an oracle, drafting up to
    ``k`` tokens a call and no filler rows; returns the verify calls needed."""
    from benchmarks.oracle_session import OracleSession

    stats = DecodeStats()
    eot = ref[-1]
    decode_window(OracleSession(ref[:-1], eot, "batch-invariant", row_floor=1, row_ceiling=k + 1), drafter,
                  FixedDraftLength(k), 224, eot, stats, lambda _tokens: eot)
    drafter.end(ref[:-1])
    return stats.verify_calls


# --- builder and format ---------------------------------------------------------------------------
def test_build_is_deterministic(tok, car_lines, car_map, tmp_path):
    again = build_token_map(list(car_lines), tok)
    assert again.to_bytes() == car_map.to_bytes()
    a, b = car_map.save(tmp_path / "a.tmap"), again.save(tmp_path / "b.tmap")
    assert a.read_bytes() == b.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # temp files renamed away


def test_round_trip_and_header(tok, car_map, car_map_file):
    loaded = load_token_map(car_map_file, tok)
    assert loaded.to_bytes() == car_map.to_bytes()
    st = loaded.stats()
    assert st["fingerprint"] == tok.fingerprint() and st["vocab_size"] == tok.vocab_size
    assert (st["n"], st["max_len"], st["transcripts"]) == (3, car_map.header.max_len, 3000)
    assert st["begin"] == tok.special.no_timestamps and st["eot"] == tok.special.eot
    assert car_map_file.stat().st_size == st["bytes"]
    # both leading-space variants of a first word start an utterance path; utterances end in EOT
    begin = loaded.begin_node
    assert loaded.child(begin, tok.encode(" Please")[0]) >= 0 and loaded.child(begin, tok.encode("Please")[0]) >= 0
    node = loaded.find([tok.special.no_timestamps, *tok.encode(" Avoid highways on this route.")])
    assert node >= 0 and loaded.child(node, tok.special.eot) >= 0


def test_map_for_another_tokenizer_is_refused(car_map_file, tiny_model_dir):
    tiny = WhisperTokenizer.from_model_dir(tiny_model_dir)
    with pytest.raises(TokenMapError, match="another tokenizer"):
        load_token_map(car_map_file, tiny)
    with pytest.raises(TokenMapError, match="another tokenizer"):
        load(car_map_file, fingerprint="0123456789abcdef")


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "empty", "version", "trailing"])
def test_damaged_map_is_refused(car_map_file, tmp_path, damage):
    data = bytearray(car_map_file.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "flip":
        data[HEADER_SIZE + len(data) // 3] ^= 0x40
    elif damage == "magic":
        data[:8] = b"NOTAMAP!"
    elif damage == "empty":
        data = bytearray()
    elif damage == "version":
        data[8] = 99
    elif damage == "trailing":
        data += b"\0" * 64
    bad = tmp_path / "bad.tmap"
    bad.write_bytes(bytes(data))
    expected = {"truncate": "truncated", "flip": "checksum", "magic": "magic", "empty": "truncated",
                "version": "newer", "trailing": "trailing"}[damage]
    with pytest.raises(TokenMapError, match=expected):
        load_token_map(bad)


def test_language_is_recorded_and_maps_without_one_stay_version_1(tok, car_lines, car_map, car_map_file, tmp_path,
                                                                  tiny_model_dir):
    """A map records its transcripts' language (format version 2: a 192-byte header); a map without
    one is written as version 1, the format older readers read, and loads with no language implied."""
    data = car_map_file.read_bytes()
    assert car_map.header.language == "en" and struct.unpack_from("<II", data, 8) == (2, 192)
    st = load_token_map(car_map_file, tok).stats()
    assert (st["language"], st["format_version"], st["bytes"]) == ("en", 2, len(data))
    none = build_token_map(car_lines, tok, language=None).save(tmp_path / "none.tmap")
    old = none.read_bytes()
    assert struct.unpack_from("<II", old, 8) == (1, 128) and old[128:] == data[192:]  # the same trie
    loaded = load_token_map(none, tok)
    assert loaded.header.language is None and loaded.stats()["format_version"] == 1
    assert build_token_map(car_lines[:50], tok, language="de").header.language == "de"
    assert build_token_map(car_lines[:50], tok, language="none").header.language is None
    # a code in capitals or an English name (openai-whisper's command line takes names) is recorded as its code
    assert build_token_map(car_lines[:50], tok, language="German").header.language == "de"
    assert build_token_map(car_lines[:50], tok, language="EN").header.language == "en"
    with pytest.raises(TokenMapError, match="unknown language"):
        build_token_map(car_lines, tok, language="englisch")
    with pytest.raises(TokenMapError, match="English only"):
        build_token_map(car_lines[:50], WhisperTokenizer.from_model_dir(tiny_model_dir), language="de")


def test_budget_caps_the_file(tok, car_lines, car_map):
    small = build_token_map(car_lines, tok, budget_bytes=200_000)
    assert small.stats()["bytes"] <= 200_000 < car_map.stats()["bytes"]
    assert small.header.min_count > car_map.header.min_count  # the rarest entries went first
    with pytest.raises(TokenMapError, match="n must be"):
        build_token_map(car_lines, tok, n=0)


def test_load_is_fast(car_map_file, tok):
    load_token_map(car_map_file, tok)  # the tokenizer's fingerprint is computed once, then cached
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        load_token_map(car_map_file, tok)
        times.append(time.perf_counter() - t0)
    assert min(times) < 0.1


# --- drafting -----------------------------------------------------------------------------------
def test_backoff_drafts_after_an_unseen_slot(tok):
    lines = [f"Navigate to {n} {street} Street, {city}." for n in range(10, 100, 6)
             for street in ("Elm", "Oak", "Pine") for city in ("Leeds", "York")]
    tmap = build_token_map(lines, tok)
    drafter = TokenMapDrafter(tmap, tok)
    drafter.begin(_window(tok))
    # "9999" never occurs: the utterance's own prefix is lost after it, shorter contexts still know
    # that " Street" follows a street name and that the city ends the utterance.
    history = tok.encode(" Navigate to 9999 Oak")
    assert tok.decode(drafter.propose(history, 2)) == " Street,"
    history = tok.encode(" Navigate to 9999 Oak Street, York")
    assert drafter.propose(history, 4) == [*tok.encode("."), tok.special.eot]
    # a slot stops the draft instead of guessing one of many numbers
    history = tok.encode(" Navigate to")
    assert drafter.propose(history, 8) == []
    assert drafter.guess(history) is not None  # the cheap filler guess is always there


def test_prefix_memory_recalls_a_learned_map_whole(tok, tmp_path):
    utterance = tok.encode(" Remind me to water the tomatoes at 6 p.m. on Sunday.")
    learner = TokenMapDrafter(None, tok, learn=True)
    learner.end(utterance)
    saved = learner.save(tmp_path / "learned.tmap")
    tmap = load_token_map(saved, tok)
    assert tmap.header.flags & FLAG_LEARNED and tmap.header.n_sequences == 1
    drafter = TokenMapDrafter(tmap, tok)
    drafter.begin(_window(tok))
    assert drafter.propose(utterance[:1], 64) == [*utterance[1:], tok.special.eot]
    assert all(p > 0.5 for p in drafter.last_confidence)


def test_online_learning_drafts_a_repeat_fully(tok, car_map, shared_data):
    rows = [json.loads(x) for x in (shared_data / "domain/car/test.jsonl").read_text().splitlines() if x.strip()]
    eot = tok.special.eot
    refs = [[*tok.encode(" " + row["text"]), eot] for row in rows[:10]]
    for ref in refs:
        learner = TokenMapDrafter(None, tok, learn=True)
        assert learner.propose(ref[:1], 8) == [] and learner.guess(ref[:1]) is None
        learner.begin(_window(tok))
        assert _verify_rounds(learner, ref) == len(ref) - 1  # nothing known yet: one token a call
        learner.begin(_window(tok))
        assert learner.propose(ref[:1], 64) == ref[1:]  # the second pass is drafted whole
    # one learner for all: utterances that start alike branch once or twice, the rest is recalled
    learner = TokenMapDrafter(None, tok, learn=True)
    first = sum(_verify_rounds(learner, ref) for ref in refs)
    second = sum(_verify_rounds(learner, ref) for ref in refs)
    assert second <= 2 * len(refs) < first
    # with a static map beside it, a repeat still needs fewer verify calls than the first time
    both = TokenMapDrafter(car_map, tok, learn=True)
    ref = [*tok.encode(" " + rows[0]["text"]), eot]
    first = _verify_rounds(both, ref)
    assert _verify_rounds(both, ref) < first <= len(ref)


def test_recall_picks_the_past_utterance_said_as_long(tok):
    """Past commands that start alike: the one said about as long as this window is drafted, even
    where the other was said more often; without a length the more frequent one wins."""
    eot = tok.special.eot
    short = tok.encode(" Can you call Sarah?")
    long = tok.encode(" Can you add a stop at the pharmacy near Market Street?")
    common = 2  # " Can", " you"
    assert short[:common] == long[:common] and short[common] != long[common]
    learner = TokenMapDrafter(None, tok, learn=True)
    for text, seconds in ((short, 1.0), (short, 1.05), (short, 0.95), (long, 2.9)):
        learner.begin(WindowContext(prompt=(), eot=eot, max_new_tokens=224, speech_s=seconds))
        learner.end(text)

    def draft(seconds: float | None) -> list[int]:
        learner.begin(WindowContext(prompt=(), eot=eot, max_new_tokens=224, speech_s=seconds))
        return learner.propose(long[:common], 64)

    assert draft(2.8) == [*long[common:], eot]  # 3 % shorter than when it was learned
    assert draft(1.0) == [*short[common:], eot]
    recalled = learner.last_confidence[0]
    assert draft(None)[:1] == short[common:common + 1]  # no length known: counts decide, as before
    # a new command (no past length near it): the recall counts vanish, the n-grams decide, less sure
    draft(6.0)
    assert learner.last_confidence[0] < recalled - 0.1
    # the length view is dropped when the trie grows: a new utterance is recalled at once
    other = tok.encode(" Can you tune to 89.5 FM?")
    learner.begin(WindowContext(prompt=(), eot=eot, max_new_tokens=224, speech_s=2.0))
    learner.end(other)
    assert draft(2.0) == [*other[common:], eot]


def test_speech_seconds_ignores_leading_and_trailing_silence():
    import numpy as np

    from specwhisper.audio import speech_seconds

    rate = 16000
    t = np.arange(int(1.2 * rate)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    noise = np.random.default_rng(0).normal(0, 1e-4, int(0.7 * rate)).astype(np.float32)
    padded = np.concatenate([noise, tone, noise[: int(0.4 * rate)]])
    assert abs(speech_seconds(padded) - 1.2) <= 0.04
    assert speech_seconds(np.zeros(rate, np.float32)) == 1.0  # all silence: the whole length
    assert speech_seconds(np.zeros(10, np.float32)) == 10 / rate


def test_dynamic_save_merges_into_the_static_map(tok, car_map, tmp_path):
    drafter = TokenMapDrafter(car_map, tok, learn=True)
    new = tok.encode(" Open the sunroof halfway, please.")
    drafter.end(new)
    merged = load_token_map(drafter.save(tmp_path / "merged.tmap"), tok)
    assert merged.header.n_sequences == car_map.header.n_sequences + 1
    begin = [tok.special.no_timestamps]
    assert merged.find(begin + new + [tok.special.eot]) >= 0
    assert merged.find(begin + tok.encode(" Avoid highways on this route.")) >= 0
    only = TokenMapDrafter(car_map, tok, learn=True, save_merged=False)
    only.end(new)
    assert load_token_map(only.save(tmp_path / "only.tmap"), tok).header.n_sequences == 1
    with pytest.raises(TokenMapError, match="learn"):
        TokenMapDrafter(car_map, tok).save(tmp_path / "x.tmap")


# --- CLI and bad input ----------------------------------------------------------------------------
def test_cli_build_info_inspect(base_model_dir, shared_data, tmp_path, capsys):
    out = tmp_path / "domain.tmap"
    manifest = shared_data / "domain/smarthome/test.jsonl"
    rc = main(["tokenmap", "build", str(shared_data / "domain/car/train.txt"), str(manifest),
               "--model", str(base_model_dir), "-o", str(out)])
    assert rc == 0 and out.is_file()
    capsys.readouterr()
    assert main(["tokenmap", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["transcripts"] == 3060 and info["nodes"] > 1000 and info["language"] == "en"
    assert main(["tokenmap", "inspect", str(out), "Navigate to 12 Baker", "--model", str(base_model_dir)]) == 0
    text = capsys.readouterr().out
    assert "context ' Baker'" in text and " Street" in text and "draft:" in text


def test_cli_build_records_the_language(base_model_dir, shared_data, tmp_path, capsys):
    src, out = str(shared_data / "domain/car/train.txt"), tmp_path / "none.tmap"
    assert main(["tokenmap", "build", src, "--model", str(base_model_dir), "-o", str(out), "--language", "none"]) == 0
    assert "no language (--language)" in capsys.readouterr().err
    default = tmp_path / "default.tmap"
    assert main(["tokenmap", "build", src, "--model", str(base_model_dir), "-o", str(default)]) == 0
    assert "language en (the default; --language sets it)" in capsys.readouterr().err
    assert main(["tokenmap", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["language"] is None and info["format_version"] == 1
    bad = tmp_path / "bad.tmap"
    assert main(["tokenmap", "build", src, "--model", str(base_model_dir), "-o", str(bad), "--language", "xx"]) == 2
    assert "unknown language" in capsys.readouterr().err and not bad.exists()


@pytest.mark.parametrize("kind", ["empty", "binary", "latin1", "long_line", "jsonl_no_text", "jsonl_broken"])
def test_cli_build_refuses_bad_transcripts(base_model_dir, tmp_path, capsys, kind):
    src = tmp_path / ("bad.jsonl" if kind.startswith("jsonl") else "bad.txt")
    content = {
        "empty": b"\n  \n",
        "binary": bytes(range(256)) * 8,
        "latin1": "Turn on the lights.\nAllume la lumi\u00e8re.\n".encode("latin-1"),
        "long_line": b"Turn on the lights.\n" + b"word " * 210_000 + b"\n",
        "jsonl_no_text": b'{"audio": "a.flac", "text": "ok"}\n{"audio": "b.flac"}\n',
        "jsonl_broken": b'{"text": "ok"}\n{"text": \n',
    }[kind]
    src.write_bytes(content)
    out = tmp_path / "out.tmap"
    rc = main(["tokenmap", "build", str(src), "--model", str(base_model_dir), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and str(src) in err and "Traceback" not in err
    expected = {"empty": "empty", "binary": "binary", "latin1": "not UTF-8", "long_line": "line 2",
                "jsonl_no_text": "line 2", "jsonl_broken": "line 2"}[kind]
    assert expected in err
    assert sorted(os.listdir(tmp_path)) == [src.name]  # no output, no temp file


def test_cli_refuses_a_damaged_or_foreign_map(car_map_file, tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "cut.tmap"
    bad.write_bytes(car_map_file.read_bytes()[:-10])
    assert main(["tokenmap", "info", str(bad)]) == 2
    assert "truncated" in capsys.readouterr().err
    assert main(["tokenmap", "inspect", str(car_map_file), "Call", "--model", str(tiny_model_dir)]) == 2
    assert "another tokenizer" in capsys.readouterr().err


def test_merge_equals_building_from_the_union(tok, car_lines):
    """Merging learned counts into a map gives the same trie as counting everything at once."""
    import numpy as np

    from specwhisper.tokenmap.build import BuildParams, build_from_sequences, tokenize_transcripts
    from specwhisper.tokenmap.dynamic import DynamicTrie

    a, b = car_lines[:200], car_lines[200:260]
    params = BuildParams(min_count=1, top_k=None)
    fp, vocab = tok.fingerprint(), tok.vocab_size
    base = build_from_sequences(tokenize_transcripts(a, tok, variants=False), params, fp, vocab)
    union = build_from_sequences(tokenize_transcripts(a + b, tok, variants=False), params, fp, vocab)
    dyn = DynamicTrie(3, base.header.max_len, tok.special.no_timestamps, tok.special.eot)
    for line in b:
        dyn.add(tok.encode(" " + line))
    merged = dyn.to_token_map(fp, vocab, base=base)
    for name in ("token", "count", "best", "child_lo"):
        assert np.array_equal(getattr(merged.arrays, name), getattr(union.arrays, name)), name
    assert merged.header.n_sequences == len(a) + len(b)
    # the in-memory trie counts exactly what its file form holds
    alone = dyn.to_token_map(fp, vocab)
    for line in b[:20]:
        ids = [tok.special.no_timestamps, *tok.encode(" " + line), tok.special.eot]
        for i in range(1, len(ids) + 1):
            assert dyn.count(dyn.find(ids[:i])) == alone.count(alone.find(ids[:i]))
        assert dyn.count(dyn.find(ids[2:5])) == alone.count(alone.find(ids[2:5]))


def test_simulated_drafting_quality(tok, car_map, shared_data):
    """Offline replay of held-out and repeated car commands (benchmarks/tokenmap_sim.py) keeps its targets."""
    from benchmarks.tokenmap_sim import NaiveNgramDrafter, make_policy, simulate, zipf_stream
    from specwhisper.policy import VerifyCost

    rows = [json.loads(x) for x in (shared_data / "domain/car/test.jsonl").read_text().splitlines() if x.strip()]
    utts = [tok.encode(" " + r["text"]) for r in rows]
    cost = VerifyCost.default("cpu")

    def speedup(drafter, stream) -> float:
        return simulate(drafter, stream, _window(tok), make_policy("auto", cost, 2), cost, 2).row()["speedup"]

    held_out = speedup(TokenMapDrafter(car_map, tok), utts)
    assert held_out >= 1.3 and held_out > speedup(NaiveNgramDrafter(car_map), utts) + 0.05
    repeated = [utts[i] for i in zipf_stream(len(utts), 300, seed=0)]
    assert speedup(TokenMapDrafter(None, tok, learn=True), repeated) >= 2.0
