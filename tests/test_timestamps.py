"""Timestamp decoding: the rules, the seek step, CT2's own timestamped greedy, exactness, long audio.

Long audio decoded without timestamps ends windows early and drops speech (46 % WER on the
LJSpeech long-form file); with timestamps and seeking each window starts where the last complete
segment ended. The rules run per row in the verifier, so speculation still cannot change tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from adversarial import check_exact_under_adversaries
from clips import representative
from conftest import load_manifest
from decoding import decode, encode_window, generate_tokens
from specwhisper.timestamps import TimestampRules, split_window

# a toy vocabulary: text 0..9, EOT 10, notimestamps 11, timestamps 12..31
EOT, NO_TS, TB, VOCAB = 10, 11, 12, 32
RULES = TimestampRules(eot=EOT, no_timestamps=NO_TS, timestamp_begin=TB, vocab_size=VOCAB, max_initial_index=5)


def _allowed(emitted: list[int], scores: np.ndarray | None = None) -> set[int]:
    row = np.zeros(VOCAB, dtype=np.float32) if scores is None else scores.astype(np.float32).copy()
    RULES.apply(emitted, row)
    return {i for i in range(VOCAB) if np.isfinite(row[i])}


def test_rules_shape_timestamps_as_whisper_was_trained():
    assert _allowed([]) == set(range(TB, TB + 6))  # a timestamp first, at most max_initial
    assert _allowed([TB]) == set(range(0, NO_TS))  # a lone first timestamp opens a segment: text or EOT
    text_logits = np.zeros(VOCAB, dtype=np.float32)
    text_logits[:EOT] = 5.0  # text far likelier than timestamps: the probability rule stays out
    assert _allowed([TB, 3], text_logits) == set(range(0, NO_TS)) | set(range(TB, VOCAB))
    eot_likely = np.zeros(VOCAB, dtype=np.float32)
    eot_likely[EOT] = 5.0
    assert _allowed([TB, 3, TB + 4], eot_likely) == {EOT} | set(range(TB + 4, VOCAB))  # a pair or the end; never back
    assert _allowed([TB, 3, TB + 4]) == set(range(TB + 4, VOCAB))  # EOT loses to the timestamps' total
    assert _allowed([TB, 3, TB + 4, TB + 4], text_logits) == set(range(0, NO_TS))  # after a pair: text
    assert NO_TS not in _allowed([TB, 3], text_logits)
    likely_stamp = np.zeros(VOCAB, dtype=np.float32)
    likely_stamp[TB + 7:] = 3.0  # together likelier than the best text token
    likely_stamp[2] = 4.0
    assert _allowed([TB, 3], likely_stamp) == set(range(TB, VOCAB))


def test_split_window_keeps_complete_segments_and_seeks_to_the_last_pair():
    t = lambda s: TB + int(round(s / 0.02))  # noqa: E731
    tokens = [t(0), 1, 2, t(0.1), t(0.1), 3, t(0.3), t(0.3), 4, 5, EOT]
    split = split_window(tokens, TB, EOT, offset_s=10.0, window_frames=3000)
    assert [(round(a, 2), round(b, 2), p) for a, b, p, _ in split.segments] == [(10.0, 10.1, [1, 2]), (10.1, 10.3, [3])]
    assert split.advance_frames == 30  # 0.30 s: the incomplete "4 5" is decoded again by the next window
    assert split.tail == [TB, 4, 5]  # the tail relabelled to start the next window, for drafting
    assert split.kept == tokens[:7]
    ending = [t(0), 1, t(0.2), t(0.2), 2, t(0.36)]  # text closed by a single timestamp: the window is done
    split = split_window(ending, TB, EOT, offset_s=0.0, window_frames=2000)
    assert split.advance_frames == 2000 and split.tail == [] and len(split.segments) == 2
    assert round(split.segments[-1][1], 2) == 0.36
    open_end = [t(0), 1, 2]  # no pair at all: one segment to the end of the window's content
    split = split_window(open_end, TB, EOT, offset_s=5.0, window_frames=1200)
    assert split.advance_frames == 1200 and [(a, b) for a, b, _, _ in split.segments] == [(5.0, 17.0)]
    # without a pair, Whisper and faster-whisper start the segment at the window's start and end it
    # at the last timestamp (not at the first timestamp, nor at the window's end)
    late = [t(1.0), 1, 2, t(4.0)]
    split = split_window(late, TB, EOT, offset_s=52.0, window_frames=1000)
    assert [(round(a, 2), round(b, 2)) for a, b, _, _ in split.segments] == [(52.0, 56.0)]
    one = [t(1.0), 1, 2]  # its only timestamp is the last one
    assert [(round(a, 2), round(b, 2)) for a, b, _, _ in split_window(one, TB, EOT, 52.0, 1000).segments] == [(52.0, 53.0)]
    stuck = [t(0), 1, t(0), t(0), 2]  # a pair at 0.00 would never advance
    assert split_window(stuck, TB, EOT, offset_s=0.0, window_frames=3000).advance_frames == 3000
    # a window shorter than the encoder input (chunk_length) can pair timestamps past its content:
    # kept within the window by default, followed wherever it lies with max_advance (faster-whisper)
    past = [t(0), 1, t(0.3), t(0.3), 2]
    assert split_window(past, TB, EOT, offset_s=0.0, window_frames=20).advance_frames == 20
    assert split_window(past, TB, EOT, offset_s=0.0, window_frames=20, max_advance=3000).advance_frames == 30


def _longform(shared_data) -> list[dict]:
    return load_manifest(shared_data / "longform" / "manifest.jsonl")


# Every third window in the README's run (a first window, a window 27 s in, a short clip), the
# others with -m full.
@pytest.mark.parametrize("third", [True, pytest.param(False, marks=pytest.mark.full)], ids=["third", "others"])
def test_single_row_timestamps_equal_ct2_generate(base_engine, shared_data, third):
    """Our rules in single-row numerics give CT2 ``generate``'s timestamped greedy tokens."""
    windows = [(clip["path"], start) for clip in _longform(shared_data) for start in (0, 2700)]
    windows += [(clip["path"], 0) for clip in representative(shared_data)[::9][:4]]
    tb = base_engine.tokenizer.special.timestamp_begin
    for path, start in [w for i, w in enumerate(windows) if (i % 3 == 0) == third]:
        enc = encode_window(base_engine, path, start)
        ours, _ = decode(base_engine, enc, "single-row", timestamps=True)
        assert ours == generate_tokens(base_engine, enc, timestamps=True), f"{path} @ {start}"
        assert ours[0] >= tb and any(t >= tb for t in ours[1:]), "no timestamps decoded"


def test_timestamped_speculation_is_exact_with_adversarial_drafters(base_engine, shared_data):
    for seed, clip in enumerate(_longform(shared_data)):
        enc = encode_window(base_engine, clip["path"], 0)
        check_exact_under_adversaries(base_engine, enc, seed, f"{clip['audio']} with timestamps", timestamps=True)


def test_prefix_and_own_suppression_are_exact_with_adversarial_drafters(base_engine, shared_data):
    """faster-whisper's ``prefix`` (forced tokens the timestamp rules count as emitted) and a
    ``suppress_tokens`` list of the caller's own: drafts still cannot change a token."""
    tok = base_engine.tokenizer
    clip = _longform(shared_data)[0]
    enc = encode_window(base_engine, clip["path"], 0)
    prefix = [tok.special.timestamp_begin] + tok.encode(" Mister")
    suppress = sorted(set(base_engine.lm.suppress) | set(tok.encode(" the") + tok.encode(",")))
    tokens = check_exact_under_adversaries(base_engine, enc, 7, f"{clip['audio']} with a prefix", timestamps=True,
                                           prefix=prefix, suppress=suppress)
    # the prefix opened the segment: the model goes on with text, and closes it with a timestamp
    assert tokens and not set(tokens) & set(suppress) and tokens[0] < tok.special.eot
    assert any(t >= tok.special.timestamp_begin for t in tokens)


@pytest.fixture(scope="module")
def ljspeech(shared_data) -> dict:
    return next(c for c in _longform(shared_data) if c["audio"].startswith("ljspeech"))


def test_long_audio_seeks_by_segment_and_keeps_the_speech(tiny_model_dir, ljspeech):
    """Timestamps (the default beyond 30 s) keep the speech that fixed windows drop, and the
    segments tile the audio. (That speculation leaves a seeking window's tokens alone is asserted on
    long-form with previous text and the temperature ladder: test_fallback.py.) On tiny.en: seeking
    is the engine's, not the model's (AMD EPYC, AVX2: tiny.en 37 errors of 563 words seeking, 117 in
    fixed windows, 16 s for both runs; base 42 and 88, 29 s)."""
    from benchmarks.metrics import clip_errors
    from specwhisper import WhisperEngine

    engine = WhisperEngine(tiny_model_dir, compute_type="int8", threads=2)
    seeking = engine.transcribe(ljspeech["path"], language="en", numerics="batch-invariant")
    fixed = engine.transcribe(ljspeech["path"], language="en", numerics="batch-invariant", timestamps="off")
    assert seeking.timestamps and not fixed.timestamps
    errors, words = clip_errors(seeking.text, [ljspeech["text"]])
    fixed_errors, _ = clip_errors(fixed.text, [ljspeech["text"]])
    # Fixed windows cut words at each of their edges and often end a window early; seeking decodes
    # them again whole. Margins from that, not from one CPU's counts (base: over 3x on the Xeon, 88 vs
    # 42 on the AMD EPYC): at least 2 words more lost per window edge, and 1.5x the errors.
    edges = len(fixed.windows) - 1
    assert errors / words < 0.12, (errors, words)
    assert fixed_errors - errors >= 2 * edges and fixed_errors > 1.5 * errors, (errors, fixed_errors, edges)
    segments = seeking.segments
    assert all(a.end_s <= b.start_s + 1e-6 and a.start_s <= a.end_s for a, b in zip(segments, segments[1:]))
    assert segments[-1].end_s > seeking.duration_s - 10.0
    starts = [w.start_s for w in seeking.windows]
    assert len(starts) > len(fixed.windows) and starts == sorted(set(starts))
    from specwhisper.writers import render

    srt = render(seeking, "srt")
    cues = [c for c in srt.strip().split("\n\n") if c]
    assert len(cues) == len([s for s in segments if s.text.strip()]) > len(seeking.windows)
    assert cues[1].splitlines()[1].startswith("00:00:") and " --> " in cues[1]
    assert seeking.stats["verify_calls"] > 0


def test_short_clip_with_timestamps_gives_timed_segments(base_engine, shared_data):
    """``--timestamps on`` on a short clip: segments inside the clip; with a short encoder window
    (``--audio-ctx auto``) the one window holds the whole clip and is decoded once."""
    path = shared_data / "real/audio/jfk.flac"
    plain = base_engine.transcribe(path, language="en", numerics="single-row", timestamps="off")
    for audio_ctx in ("full", "auto"):
        timed = base_engine.transcribe(path, language="en", numerics="single-row", timestamps="on",
                                       audio_ctx=audio_ctx)
        assert timed.timestamps and not plain.timestamps
        if audio_ctx == "auto":
            assert len(timed.windows) == 1
        segments = timed.segments
        assert segments and segments[0].start_s >= 0.0 and segments[-1].end_s <= timed.duration_s + 0.5
        assert "ask not what your country" in timed.text.lower()
        assert timed.text.count("ask not") == plain.text.count("ask not") == 1
