"""Fast checks of the benchmark suite's pure parts: scoring, aggregation, writers, the verify-cost
file, the peer worker protocol. No peer venv and no model runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import metrics, report, verify_cost
from benchmarks.data import load_set, subset
from benchmarks.progress import Progress
from specwhisper.errors import SpecWhisperError

FIXTURES = Path(__file__).parent / "fixtures"


# --- WER ------------------------------------------------------------------------------------
def test_normaliser_makes_reference_styles_agree():
    pytest.importorskip("whisper_normalizer")
    assert metrics.normalise("MISTER QUILTER IS THE APOSTLE") == metrics.normalise("Mr. Quilter is the apostle!")
    assert metrics.normalise("Set the thermostat to 21 degrees.") == "set the thermostat to 21 degrees"
    assert metrics.normalise("seven") == metrics.normalise("7")


def test_edit_distance_counts_substitutions_insertions_deletions():
    assert metrics.edit_distance("a b c".split(), "a x c d".split()) == 2
    assert metrics.edit_distance([], ["a", "b"]) == 2
    assert metrics.edit_distance(["a"], []) == 1


def test_digit_runs_are_scored_digit_by_digit():
    """Spoken digits joined into one number by the normaliser and the same digits written apart
    score alike; a wrong digit is one error, not the whole run."""
    assert metrics.clip_errors("237- 7- 3, 9.", ["two three seven seven three nine"]) == (0, 6)
    assert metrics.clip_errors("2, 3, 8", ["two three seven"]) == (1, 3)
    assert metrics.clip_errors("set it to 21 degrees", ["Set it to twenty one degrees."]) == (0, 6)


def test_clip_errors_uses_the_closest_reference_and_corpus_wer_pools():
    errors, n = metrics.clip_errors("7", ["seven", "7"])
    assert errors == 0 and n == 1
    assert metrics.clip_errors("turn on the light", ["Turn on the lights."]) == (1, 4)
    rate = metrics.wer([("turn on the light", ["Turn on the lights."], "en"), ("hello", ["hello there"], "en")])
    assert rate == pytest.approx(2 / 6)
    assert metrics.wer([]) is None


def test_sign_test_tells_a_coin_from_a_real_difference():
    assert metrics.sign_test(22, 24) == pytest.approx(0.883, abs=1e-3)  # --audio-ctx auto vs full, 120 commands
    assert metrics.sign_test(0, 10) == pytest.approx(2 / 1024)
    assert metrics.sign_test(5, 5) == 1.0 and metrics.sign_test(0, 0) == 1.0


def test_character_languages_are_scored_by_character():
    errors, n = metrics.clip_errors("今天天气", ["今天天气好"], "zh")
    assert (errors, n) == (1, 5)


# --- aggregation ----------------------------------------------------------------------------
def _rec(system, clip, rep, total, decoder, tokens, *, ok=True, stats=None, text="turn on the lights", **kw):
    r = {"set": "s", "clip": clip, "system": system, "repeat": rep, "ok": ok, "duration_s": 2.0, "language": "en",
         "refs": ["Turn on the lights."], "text": text, "tokens": tokens, "windows": 1,
         "timings": {"load_s": 1.0, "features_s": 0.01, "encoder_s": 0.5, "decoder_s": decoder, "total_s": total},
         "stats": stats or {}, "wall_s": total, "rss_mb": 100.0, "peak_rss_mb": 120.0, "numerics": None}
    r.update(kw)
    return r


def test_summary_takes_medians_counts_identity_and_speedups():
    spec_stats = {"drafted": 8, "accepted": 6, "verify_calls": 2, "k_sum": 8, "accepted_by_len": {"2": 1, "4": 1}}
    records = [
        _rec("greedy-single-row", "a", 0, 1.0, 0.4, [1, 2, 3]),
        _rec("greedy-single-row", "a", 1, 3.0, 0.6, [1, 2, 3]),
        _rec("greedy-single-row", "a", 2, 2.0, 0.5, [1, 2, 3]),
        _rec("spec", "a", 0, 1.0, 0.25, [1, 2, 3], stats=spec_stats),
        _rec("other", "a", 0, 4.0, 1.0, [1, 2, 4], text="turn on the light"),
        _rec("other", "b", 0, 0, 0, [], ok=False, error="boom"),
        _rec("skip", "a", 0, 0, 0, [], ok=False, skipped=True, error="n/a"),
    ]
    summary = metrics.summarise(records, reference_for={"spec": "greedy-single-row", "other": "greedy-single-row"},
                                baseline="greedy-single-row", decoder_baseline="greedy-single-row")["s"]
    greedy = summary["greedy-single-row"]
    assert greedy["total_s"] == pytest.approx(2.0)  # median of 1, 3, 2
    assert greedy["decoder_ms_per_token"] == pytest.approx(1000 * 0.5 / 3)
    assert greedy["rtf"] == pytest.approx(1.0)
    spec = summary["spec"]
    assert (spec["identical"], spec["identical_of"]) == (1, 1)
    assert spec["speedup"] == pytest.approx(2.0) and spec["decoder_speedup"] == pytest.approx(2.0)
    assert spec["Ar"] == pytest.approx(0.75) and spec["Al"] == pytest.approx(3.0) and spec["mean_k"] == 4.0
    assert spec["accepted_by_len"] == {"2": 1, "4": 1}
    other = summary["other"]
    assert (other["identical"], other["identical_of"], other["failed"]) == (0, 1, 1)
    assert other["different_clips"] == ["a"]
    assert other["wer"] == pytest.approx(0.25)
    assert summary["skip"]["skipped"] == 1 and summary["skip"]["failed"] == 0


def test_identity_is_judged_against_greedy_in_the_numerics_actually_used():
    records = [_rec("greedy-single-row", "a", 0, 1.0, 0.4, [1, 2, 3]),
               _rec("greedy-batch-invariant", "a", 0, 1.0, 0.4, [1, 2, 9], numerics="batch-invariant"),
               _rec("spec-combined", "a", 0, 1.0, 0.4, [1, 2, 9], numerics="batch-invariant"),
               _rec("spec-combined", "b", 0, 1.0, 0.4, [5], numerics="single-row"),
               _rec("greedy-single-row", "b", 0, 1.0, 0.4, [5])]
    summary = metrics.summarise(records, reference_for={"spec-combined": "greedy-single-row",
                                                        "greedy-batch-invariant": "greedy-single-row"},
                                baseline=None, decoder_baseline=None)["s"]
    assert (summary["spec-combined"]["identical"], summary["spec-combined"]["identical_of"]) == (2, 2)
    assert summary["greedy-batch-invariant"]["identical"] == 0  # BI vs SR: a near-tie differs
    # without a batch-invariant greedy run, a batch-invariant clip is unchecked, not compared with single-row
    unchecked = metrics.summarise([r for r in records if r["system"] != "greedy-batch-invariant"],
                                  reference_for={"spec-combined": "greedy-single-row"}, baseline=None,
                                  decoder_baseline=None)["s"]["spec-combined"]
    assert (unchecked["identical"], unchecked["identical_of"]) == (1, 1)


def test_mixed_numerics_clips_are_checked_window_by_window():
    sr, bi = "single-row", "batch-invariant"
    starts = [0, 3000]
    records = [_rec("greedy-single-row", "a", 0, 1.0, 0.4, [1, 2, 3, 4], window_tokens=[[1, 2], [3, 4]],
                    window_seeks=starts),
               _rec("greedy-batch-invariant", "a", 0, 1.0, 0.4, [1, 9, 3, 8], numerics=bi,
                    window_tokens=[[1, 9], [3, 8]], window_seeks=starts),
               # window 0 single-row, window 1 batch-invariant: equal to neither whole greedy run
               _rec("spec-combined", "a", 0, 1.0, 0.4, [1, 2, 3, 8], numerics="mixed", window_numerics=[sr, bi],
                    window_tokens=[[1, 2], [3, 8]], window_seeks=starts),
               _rec("spec-x", "a", 0, 1.0, 0.4, [1, 2, 3, 4], numerics="mixed", window_numerics=[sr, bi],
                    window_tokens=[[1, 2], [3, 4]], window_seeks=starts),
               _rec("spec-y", "a", 0, 1.0, 0.4, [1, 2, 3, 4], numerics="mixed", window_numerics=[sr, "skipped"],
                    window_tokens=[[1, 2], []], window_seeks=starts),
               # window 1 starts where no batch-invariant greedy window started: nothing to compare it with
               _rec("spec-z", "a", 0, 1.0, 0.4, [1, 2, 3, 8], numerics="mixed", window_numerics=[sr, bi],
                    window_tokens=[[1, 2], [3, 8]], window_seeks=[0, 2400])]
    summary = metrics.summarise(records, reference_for={name: "greedy-single-row" for name in
                                                        ("spec-combined", "spec-x", "spec-y", "spec-z")},
                                baseline=None, decoder_baseline=None)["s"]
    assert (summary["spec-combined"]["identical"], summary["spec-combined"]["identical_of"]) == (1, 1)
    assert (summary["spec-x"]["identical"], summary["spec-x"]["identical_of"]) == (0, 1)  # window 1 differs
    assert summary["spec-y"]["identical"] == 1  # a skipped window is not compared
    assert summary["spec-z"]["identical_of"] == 0  # not checkable, not called equal


def test_the_policy_gap_is_reported_over_speculated_windows():
    """Expected vs delivered speedup, averaged over the windows decoded batch-invariant only, of
    runs that drafted (greedy-batch-invariant was listed as "expected 1.35x" with nothing drafted)."""
    drafted = {"drafted": 5}
    records = [_rec("spec", "a", 0, 1.0, 0.4, [1], stats=drafted, window_speedup=[["batch-invariant", 1.4, 1.1],
                                                                                  ["single-row", 0.9, 1.0]]),
               _rec("spec", "b", 0, 1.0, 0.4, [1], stats=drafted, window_speedup=[["batch-invariant", 1.6, 1.5],
                                                                                  ["batch-invariant", None, 1.2]]),
               _rec("greedy-batch-invariant", "a", 0, 1.0, 0.4, [1], window_speedup=[["batch-invariant", 1.35, 0.6]]),
               _rec("greedy-single-row", "a", 0, 1.0, 0.4, [1])]
    rows = metrics.summarise(records, reference_for={}, baseline=None, decoder_baseline=None)["s"]
    spec = rows["spec"]
    assert spec["speculated_windows"] == 2
    assert spec["predicted_speedup"] == pytest.approx(1.5) and spec["realised_speedup"] == pytest.approx(1.3)
    assert rows["greedy-single-row"]["predicted_speedup"] is None
    assert rows["greedy-batch-invariant"]["speculated_windows"] == 0
    note = report.policy_note(rows, ["greedy-single-row", "greedy-batch-invariant", "spec"])
    assert note.startswith("Policy, speculated windows (modelled") and "greedy-batch-invariant" not in note
    assert note.endswith("`spec` expected 1.50x, delivered 1.30x over 2 windows.")


def test_the_encoder_note_names_whose_encoder_is_whose():
    """It called our engine's encoder (whatever ``--encoder`` chose) the fork's and blamed a gap
    that the graph encoders had closed."""
    summary = {"s": {"greedy-single-row": {"windows": 2, "encoder_s": 0.8},
                     "ct2-greedy": {"windows": 2, "encoder_s": 1.2}}}
    note = report.encoder_note(summary)
    assert "ours 400 ms" in note and "upstream CTranslate2 (faster-whisper's) 600 ms" in note
    assert "fork" not in note and report.encoder_note({"s": {"ct2-greedy": {"windows": 1, "encoder_s": 1}}}) is None


def test_markdown_and_json_writers(tmp_path):
    refused = "single-row: the draft model's cost model refused it for this window"
    records = [_rec("greedy-single-row", "a", 0, 1.0, 0.4, [1, 2]), _rec("fw-greedy", "a", 0, 2.0, 0.8, [1, 2]),
               _rec("spec-draft-model", "a", 0, 1.0, 0.4, [1, 2], window_reasons=[refused])]
    results = {"meta": {"command": "python -m benchmarks run --suite real", "systems": ["greedy-single-row",
                                                                                         "fw-greedy",
                                                                                         "spec-draft-model"],
                        "config": {"model": "base", "compute_type": "int8", "device": "cpu", "threads": 2},
                        "baseline": "fw-greedy", "decoder_baseline": "greedy-single-row", "repeat": 3},
               "sets": {"s": {"n_clips": 1, "audio_s": 2.0, "unavailable": {"spec-tokenmap": "no map"},
                              "failures": [{"system": "x", "clip": "b", "repeat": 0, "error": "boom"}]}},
               "records": records}
    results["summary"] = metrics.summarise(records, reference_for={"fw-greedy": "greedy-single-row"},
                                           baseline="fw-greedy", decoder_baseline="greedy-single-row")
    md = report.markdown_report(results)
    assert "python -m benchmarks run --suite real" in md
    row = next(line for line in md.splitlines() if line.startswith("| greedy-single-row"))
    assert "2.00x" in row  # e2e speedup vs fw-greedy: 2.0 / 1.0
    assert "`spec-tokenmap`: no map" in md and "boom" in md
    assert f"Drafted nothing (the windows' most common reason): `spec-draft-model`: {refused}." in md
    path = report.write_json(tmp_path / "out" / "bench.json", {**results, "p": tmp_path, "n": np.float32(1.5)})
    loaded = json.loads(path.read_text())
    assert loaded["n"] == 1.5 and loaded["p"] == str(tmp_path)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.plots import plot_all, plot_verify_cost

    stats = {"drafted": 4, "accepted": 3, "verify_calls": 1, "k_sum": 4, "accepted_by_len": {"3": 1}}
    records = [_rec("greedy-single-row", "a", 0, 1.0, 0.4, [1, 2]), _rec("spec", "a", 0, 0.5, 0.2, [1, 2], stats=stats)]
    results = {"meta": {"systems": ["greedy-single-row", "spec"], "baseline": "greedy-single-row"}, "records": records,
               "summary": metrics.summarise(records, reference_for={}, baseline="greedy-single-row",
                                            decoder_baseline=None)}
    written = plot_all(results, tmp_path)
    assert {p.name for p in written} == {"speedup.png", "decoder_vs_tokens.png", "acceptance_hist.png"}
    curve = {"model": "base", "compute_type": "int8", "device": "cpu", "threads": 2, "step_ms": 10.0,
             "batch_ms": {"1": 10.0, "2": 12.0}}
    for p in [*written, plot_verify_cost(curve, tmp_path / "vc.png")]:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_one_turns_failures_and_skips_into_records(tmp_path):
    from benchmarks.data import Clip
    from benchmarks.runner import run_one
    from benchmarks.systems import Unavailable

    class Fake:
        def __init__(self, name, outcome):
            self.name, self.outcome = name, outcome

        def run(self, clip, audio, npy):
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

    clip = Clip(set="s", id="c", path=tmp_path / "c.flac", rel="s/c.flac", text="hi", duration_s=1.0,
                text_alt=("hello",))
    audio = np.zeros(16000 * 31, np.float32)
    ok = run_one(Fake("a", {"text": "hi", "tokens": [1], "timings": {"total_s": 0.1}}), clip, audio, tmp_path, 0)
    assert ok["ok"] and ok["windows"] == 2 and ok["refs"] == ["hi", "hello"] and ok["rss_mb"]
    failed = run_one(Fake("b", RuntimeError("decoder exploded")), clip, audio, tmp_path, 1)
    assert not failed["ok"] and "decoder exploded" in failed["error"] and not failed.get("skipped")
    skipped = run_one(Fake("c", Unavailable("English-only")), clip, audio, tmp_path, 0)
    assert skipped["skipped"] and skipped["error"] == "English-only"
    err = run_one(Fake("d", SpecWhisperError("bad audio", where="x", hint="fix")), clip, audio, tmp_path, 0)
    assert "bad audio" in err["error"] and "fix" in err["error"]


# --- verify-cost file -----------------------------------------------------------------------
def test_verify_cost_file_loads_and_matches_the_engine_cost_model(tmp_path):
    curve = {"model": "base", "compute_type": "int8", "device": "cpu", "threads": 2, "step_ms": 10.0,
             "batch_ms": {"1": 9.5, "2": 11.0, "4": 13.0, "16": 20.0}}
    path = tmp_path / "vc.json"
    path.write_text(json.dumps(curve))
    loaded = verify_cost.load_curve(path)
    assert verify_cost.relative_cost(loaded) == {1: 1.0, 2: 1.1, 4: 1.3, 16: 2.0}
    policy = pytest.importorskip("specwhisper.policy")
    if hasattr(policy.VerifyCost, "from_file"):
        assert policy.VerifyCost.from_file(path).by_rows == pytest.approx(verify_cost.relative_cost(loaded))


@pytest.mark.parametrize("content", ["{not json", json.dumps({"model": "base", "step_ms": 1.0}),
                                     json.dumps({"model": "b", "compute_type": "int8", "device": "cpu", "threads": 2,
                                                 "step_ms": 0, "batch_ms": {"1": 1}})])
def test_bad_verify_cost_files_give_a_clear_error(tmp_path, content):
    path = tmp_path / "vc.json"
    path.write_text(content)
    with pytest.raises(SpecWhisperError) as err:
        verify_cost.load_curve(path)
    assert "verify-cost" in err.value.hint


# --- data, progress, peer protocol ----------------------------------------------------------
def test_subset_spreads_over_the_manifest(shared_data):
    clips = load_set("real", shared_data)
    assert len(clips) == 107 and sum(c.kind == "sentence" for c in clips) == 7
    picked = subset(clips, 4)
    assert len(picked) == 4 and picked[0].id == "jfk" and any(c.kind == "digit" for c in picked)
    assert subset(clips, None) == clips
    digit = next(c for c in clips if c.kind == "digit")
    assert digit.text_alt and all(isinstance(a, str) for a in digit.text_alt)


def test_limits_per_set():
    from benchmarks.data import limit_for, parse_limits

    limits = parse_limits(["4", "longform=1"])
    assert limits == {"*": 4, "longform": 1}
    assert limit_for(limits, "longform") == 1 and limit_for(limits, "car") == 4 and limit_for({}, "car") is None
    for bad in (["nope=2"], ["x"], ["0"]):
        with pytest.raises(SpecWhisperError):
            parse_limits(bad)


def test_unknown_set_is_a_clear_error(shared_data):
    with pytest.raises(SpecWhisperError):
        load_set("nope", shared_data)


def test_progress_renders_counts_and_notes():
    import io

    buf = io.StringIO()
    p = Progress(4, stream=buf)
    p.advance(1, "real jfk")
    p.note("[bench] something failed")
    p.advance(3)
    out = buf.getvalue()
    assert "1/4" in out and "4/4 100%" in out and "something failed" in out


def test_peer_worker_reports_errors_and_keeps_serving():
    """The worker protocol with this interpreter: a bad job gives one error line, the next job still runs."""
    worker = Path(__file__).resolve().parents[1] / "benchmarks" / "peer_worker.py"
    jobs = json.dumps({"op": "bogus"}) + "\n" + json.dumps({"op": "unload"}) + "\n"
    proc = subprocess.run([sys.executable, str(worker)], input=jobs, capture_output=True, text=True, timeout=60)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["event"] == "error" and "bogus" in lines[0]["error"]
    assert lines[1:] == [{"unloaded": True}, {"event": "end"}]
    assert proc.returncode == 0


def test_vocab_maps_between_base_and_tiny(base_model_dir, tiny_model_dir):
    from benchmarks.systems import vocab_maps
    from specwhisper.tokenizer import WhisperTokenizer

    main, draft = WhisperTokenizer.from_model_dir(base_model_dir), WhisperTokenizer.from_model_dir(tiny_model_dir)
    d2m, m2d = vocab_maps(main, draft)
    assert len(d2m) == draft.vocab_size and len(m2d) == main.vocab_size
    # The multilingual and English-only BPE vocabularies differ: the same text has other ids.
    the, the_draft = main.encode(" the")[0], draft.encode(" the")[0]
    assert m2d[the] == the_draft and d2m[the_draft] == the
    assert sum(i >= 0 for i in m2d) > 25000  # most common tokens exist in both
    assert m2d[main.special.eot] == draft.special.eot and d2m[draft.special.sot] == main.special.sot


# --- oracle fixtures ------------------------------------------------------------------------
def test_oracle_fixtures_are_self_describing():
    if not (FIXTURES / "mel_oracle.npz").is_file():
        pytest.skip("oracle fixtures not generated (python -m benchmarks fixtures)")
    z = np.load(FIXTURES / "mel_oracle.npz", allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    assert meta["faster_whisper"] and "FeatureExtractor" in meta["call"]
    for key, info in meta["arrays"].items():
        assert z[key].dtype == np.float32 and list(z[key].shape) == info["shape"]
        assert np.all(z[key][:, info["content_frames"]:] == 0)  # faster-whisper pads with log-mel zeros
    greedy = json.loads((FIXTURES / "fw_greedy.json").read_text(encoding="utf-8"))
    assert set(greedy["models"]) == {"base", "tiny.en"}
    for model in greedy["models"].values():
        assert len(model["clips"]) == 7 and all(c["tokens"] and c["text"] for c in model["clips"])
