"""Word timestamps against faster-whisper 1.2.1 (fixture: tests/fixtures/words/make_fw_words.py).

Our function gets the tokens faster-whisper decoded, so what is compared is word timing alone:
- with faster-whisper's raw alignment replayed, the post-processing (word splitting, heuristics,
  punctuation merging, segment edges) must reproduce its words and times exactly;
- with our own CTranslate2 encoder output and ``align`` call, the words must be identical and the
  median start/end difference at most 20 ms (the encoders differ in the last bits).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from specwhisper.word_timestamps import (
    SegmentTokens,
    Word,
    _Timing,
    add_word_timestamps,
    merge_punctuations,
    split_words,
)

FIXTURE = Path(__file__).parent / "fixtures" / "words" / "fw_words_base_int8.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
CLIPS = {c["audio"]: c for c in DATA["clips"]}
TOLERANCE_S = 0.020


@pytest.fixture(scope="module")
def tokenizer(base_int8_dir):
    from specwhisper.tokenizer import WhisperTokenizer

    return WhisperTokenizer.from_model_dir(base_int8_dir)


@pytest.fixture(scope="module")
def loaded(base_int8_dir):
    from specwhisper.backend import LoadedModel

    return LoadedModel(base_int8_dir, device="cpu", compute_type="int8", threads=2, decoder_threads=2, encoder="ct2")


def _run_window(model, tokenizer, encoder_output, window: dict):
    segments = [SegmentTokens(s["tokens"], s["start"], s["end"]) for s in window["segments"]]
    return add_word_timestamps(model, tokenizer, encoder_output, window["sot_sequence"], segments,
                               window["num_frames"], window["seek"] / 100, window["language"],
                               last_speech_timestamp=window["last_speech_timestamp"])


class _ReplayedAlignment:
    """Stands in for the CT2 model: returns the alignment faster-whisper got for this window."""

    def __init__(self, window: dict) -> None:
        self.window = window

    def align(self, features, start_sequence, text_tokens, num_frames, *, median_filter_width):
        assert start_sequence == self.window["sot_sequence"] and num_frames == self.window["num_frames"]
        assert text_tokens == [[t for s in self.window["segments"] for t in s["tokens"]]]
        raw = self.window["align"]
        pairs = list(enumerate(raw["first_time_index"]))
        return [SimpleNamespace(alignments=pairs, text_token_probs=raw["text_token_probs"])]


@pytest.mark.parametrize("audio", list(CLIPS))
def test_postprocessing_matches_faster_whisper_exactly(audio, tokenizer):
    for window in CLIPS[audio]["windows"]:
        timed = _run_window(_ReplayedAlignment(window), tokenizer, None, window)
        for seg, ref in zip(timed, window["segments"], strict=True):
            assert [w.word for w in seg.words] == [w[2] for w in ref["words"]]
            assert [(w.start, w.end) for w in seg.words] == [(w[0], w[1]) for w in ref["words"]]
            assert [w.probability for w in seg.words] == pytest.approx([w[3] for w in ref["words"]], abs=1e-9)
            assert (seg.start, seg.end) == (ref["out_start"], ref["out_end"])


@pytest.mark.parametrize("audio", list(CLIPS))
def test_words_match_faster_whisper_with_our_encoder(audio, loaded, shared_data):
    from specwhisper.audio import load_audio
    from specwhisper.features import log_mel_spectrogram, window_features

    features = log_mel_spectrogram(load_audio(shared_data / audio), n_mels=loaded.n_mels)
    diffs, edge_diffs, n_words, align_ms = [], [], 0, []
    for window in CLIPS[audio]["windows"]:
        encoder_output = loaded.encode(window_features(features, window["seek"]))
        t0 = time.perf_counter()
        timed = _run_window(loaded.model, loaded.tokenizer, encoder_output, window)
        align_ms.append((time.perf_counter() - t0) * 1000)
        for seg, ref in zip(timed, window["segments"], strict=True):
            assert [w.word for w in seg.words] == [w[2] for w in ref["words"]]
            n_words += len(seg.words)
            for ours, theirs in zip(seg.words, ref["words"]):
                diffs += [abs(ours.start - theirs[0]), abs(ours.end - theirs[1])]
            edge_diffs += [abs(seg.start - ref["out_start"]), abs(seg.end - ref["out_end"])]
    median, worst = statistics.median(diffs), max(diffs)
    print(f"\n{audio}: {len(CLIPS[audio]['windows'])} windows, {n_words} words, word start/end |diff| "
          f"median {median * 1000:.1f} ms, max {worst * 1000:.1f} ms; segment edges max "
          f"{max(edge_diffs) * 1000:.1f} ms; add_word_timestamps per window "
          f"{', '.join(f'{ms:.0f}' for ms in align_ms)} ms")
    assert median <= TOLERANCE_S
    assert statistics.median(edge_diffs) <= TOLERANCE_S


def _timings(words: list[str]) -> list[_Timing]:
    return [_Timing(w, [i], 0.0, 0.0, 1.0) for i, w in enumerate(words)]


def test_merge_punctuations_on_crafted_words():
    timings = _timings([' "', "Hello", ",", " world", ".", '"', " (", " it", " said", ")", "!"])
    merge_punctuations(timings, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
    assert [t.word for t in timings] == ['', ' "Hello,', "", " world.\"", "", "", "", " ( it", " said)!", "", ""]
    assert [t.tokens for t in timings] == [[], [0, 1, 2], [], [3, 4, 5], [], [], [], [6, 7], [8, 9, 10], [], []]
    # A word ending in a space takes no closing punctuation; a lone space counts as an opener.
    timings = _timings(["ok ", ".", " ", "x"])
    merge_punctuations(timings, "(", ".")
    assert [t.word for t in timings] == ["ok ", ".", "", " x"]


def test_merge_punctuations_on_crafted_tokens(tokenizer):
    # Expected values are faster-whisper 1.2.1's (split_to_word_tokens + merge_punctuations, run once
    # on these tokens). '!"' stays a word of its own: it is not a substring of the closing marks.
    pieces = [' "', " Hello", ",", " world", ".", " (", " it", ")", " -", " said", "!", ' "no', '!"']
    tokens = [t for p in pieces for t in tokenizer.encode(p)]
    assert tokens == [503, 2425, 11, 1002, 13, 522, 309, 8, 359, 848, 0, 503, 1771, 2963]
    words, groups = split_words(tokenizer, tokens + [tokenizer.special.eot], "en")
    assert words == pieces[:11] + [' "no', '!"', ""]
    timings = [_Timing(w, g, 0.0, 0.0, 1.0) for w, g in zip(words[:-1], groups[:-1])]
    merge_punctuations(timings, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
    assert [t.word for t in timings] == ["", ' " Hello,', "", " world.", "", "", " ( it)", "", "", " - said!", "",
                                         ' "no', '!"']
    assert [t.tokens for t in timings] == [[], [503, 2425, 11], [], [1002, 13], [], [], [522, 309, 8], [], [],
                                           [359, 848, 0], [], [503, 1771], [2963]]


def test_unicode_languages_split_per_character(tokenizer):
    tokens = tokenizer.encode("广州市房地产")
    words, groups = split_words(tokenizer, tokens, "zh")
    assert words == list("广州市房地产") and sum(groups, []) == tokens
    words, _ = split_words(tokenizer, tokenizer.encode(" hello world"), "en")
    assert words == [" hello", " world"]


def test_word_asdict_and_empty_window(tokenizer):
    assert Word(0.5, 1.0, " hi", 0.9)._asdict() == {"start": 0.5, "end": 1.0, "word": " hi", "probability": 0.9}
    out = add_word_timestamps(None, tokenizer, None, [1], [SegmentTokens([], 1.0, 2.0)], 3000, 0.0, "en")
    assert [(s.start, s.end, s.words) for s in out] == [(1.0, 2.0, [])]
