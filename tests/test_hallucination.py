"""``hallucination_silence_threshold`` (issue 19): faster-whisper's rule, its segments and words on a
recording where it fires, and exact under speculation."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from specwhisper.hallucination import cut_hallucinations, is_anomaly, word_anomaly
from specwhisper.results import Segment
from specwhisper.word_timestamps import Word

FIXTURES = Path(__file__).parent / "fixtures"


def _segment(start: float, end: float, words: list[tuple[float, float, float]]) -> Segment:
    return Segment(start, end, "x", [], [Word(a, b, " w", p) for a, b, p in words])


def test_word_and_segment_anomaly_scores():
    assert word_anomaly(0.9, 0.3) == 0
    assert word_anomaly(0.1, 0.3) == 1  # improbable
    assert word_anomaly(0.9, 0.033) == pytest.approx(1.5)  # too short
    assert word_anomaly(0.9, 3.0) == pytest.approx(1.0)  # too long
    spoken = _segment(0, 2, [(0, 0.4, 0.9), (0.4, 0.8, 0.8), (0.8, 1.3, 0.95)])
    assert not is_anomaly(spoken) and not is_anomaly(None)
    assert is_anomaly(_segment(0, 1, [(0, 0.02, 0.05), (0.02, 0.04, 0.1)]))


def test_the_rule_drops_a_window_that_opens_with_a_hallucination_and_cuts_one_amid_silence():
    hallucinated = _segment(12.0, 12.1, [(12.0, 12.05, 0.05), (12.05, 12.1, 0.05)])
    spoken = _segment(20.0, 22.0, [(20.0, 20.5, 0.9), (20.5, 21.2, 0.9), (21.2, 22.0, 0.9)])
    # the first worded segment is anomalous and starts 2 s into the window: dropped, decoded again from there
    cut = cut_hallucinations([hallucinated, spoken], 1.0, 1000, 4000, 6000, last_speech_s=9.0)
    assert cut.drop and cut.kept == 0 and cut.advance == 200
    # spoken first, then an anomalous segment with silence each side: cut there, next window starts at it
    late = _segment(26.0, 26.1, [(26.0, 26.05, 0.05), (26.05, 26.1, 0.05)])
    cut = cut_hallucinations([spoken, late], 1.0, 1000, 4000, 6000, last_speech_s=9.0)
    assert not cut.drop and cut.kept == 1 and cut.advance == 2600 - 1000
    # ... and where it ends less than the threshold before the recording does: past the end
    last = _segment(38.5, 38.6, [(38.5, 38.55, 0.05), (38.55, 38.6, 0.05)])
    cut = cut_hallucinations([spoken, last], 1.0, 1000, 3900, 3900, last_speech_s=9.0)
    assert cut.kept == 1 and cut.advance == 3900 - 1000
    assert cut_hallucinations([spoken], 1.0, 1000, 4000, 6000, 9.0).advance is None  # nothing to cut


def _fixture() -> dict:
    from benchmarks.machine import kernel_class

    path = FIXTURES / f"fw_hallucination_{kernel_class()}.json"
    if not path.is_file():
        pytest.skip(f"no faster-whisper hallucination fixture for this kind of CPU ({kernel_class()}): make it "
                    "with python -m benchmarks.make_oracle_fixtures --only hallucination")
    return json.loads(path.read_text())


def _ours(model, samples, threshold, **options):
    kw = {} if threshold is None else {"hallucination_silence_threshold": threshold}
    segments, _ = model.transcribe(samples, language="en", beam_size=1, word_timestamps=True, **kw, **options)
    return list(segments)


def test_segments_and_words_equal_faster_whispers_where_the_rule_fires(shared_data, tiny_model_dir):
    from benchmarks.make_oracle_fixtures import hallucination_input
    from specwhisper import WhisperModel

    fixture = _fixture()
    samples = hallucination_input(shared_data)
    model = WhisperModel(str(tiny_model_dir), cpu_threads=2, compute_type="int8", encoder="ct2")
    texts = {}
    for run in fixture["runs"]:
        threshold = run["options"].get("hallucination_silence_threshold")
        ours = _ours(model, samples, threshold, numerics="single-row")
        theirs = run["segments"]
        assert [s.tokens for s in ours] == [s["tokens"] for s in theirs], run["id"]
        assert [s.text for s in ours] == [s["text"] for s in theirs]
        times = [t for s in ours for t in (s.start, s.end)]
        assert times == pytest.approx([t for s in theirs for t in (s["start"], s["end"])], abs=1e-6)
        words = [t for s in ours for w in s.words for t in (w.start, w.end)]
        assert words == pytest.approx([t for s in theirs for w in s["words"] for t in (w["start"], w["end"])],
                                      abs=0.021)
        texts[threshold] = [s.text for s in ours]
    assert texts[1.0] != texts[None]  # the rule fired: this recording tests it


def test_the_rule_is_exact_under_speculation(shared_data, tiny_model_dir):
    from benchmarks.make_oracle_fixtures import hallucination_input
    from specwhisper import WhisperModel

    samples = hallucination_input(shared_data)
    model = WhisperModel(str(tiny_model_dir), cpu_threads=2, compute_type="int8")
    for numerics in ("batch-invariant", "single-row"):
        plain = _ours(model, samples, 1.0, numerics=numerics, speculation=False)
        drafted = _ours(model, samples, 1.0, numerics=numerics, draft_len=4)
        assert [s.tokens for s in drafted] == [s.tokens for s in plain]
        assert [(s.start, s.end) for s in drafted] == [(s.start, s.end) for s in plain]


def test_without_word_timestamps_the_option_warns_and_the_cli_refuses(tmp_path, capsys, shared_data,
                                                                       tiny_model_dir):
    from specwhisper import WhisperModel
    from specwhisper.cli import main

    model = WhisperModel(str(tiny_model_dir), cpu_threads=2)
    clip = shared_data / "real" / "audio" / "jfk.flac"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.transcribe(str(clip), hallucination_silence_threshold=2.0)
    assert any("needs word_timestamps=True" in str(w.message) for w in caught)
    assert main(["transcribe", str(clip), "--model", str(tiny_model_dir),
                 "--hallucination-silence-threshold", "2"]) == 2
    assert "add --word-timestamps" in capsys.readouterr().err
    assert main(["transcribe", str(clip), "--model", str(tiny_model_dir), "--word-timestamps",
                 "--hallucination-silence-threshold", "2", "--output-format", "json",
                 "--output-dir", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "jfk.json").read_text())["text"].startswith("And so my fellow Americans")
