"""faster-whisper's options on the CLI (issue 19 item 7): words in JSON, srt/vtt cut by words, beam
search, VAD, the batched pipeline, and one clear error (never a traceback) for each bad value.

Real model (tiny.en, int8) and real audio (jfk, 11 s); each run loads the model, so runs are few.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from specwhisper.cli import main
from specwhisper.results import Segment
from specwhisper.word_timestamps import Word
from specwhisper.writers import (
    MIN_CUE_S,
    CueOptions,
    iter_cues,
    lengthen_cues,
    render,
    subtitle_cues,
    wrap_words,
)

PHRASE = "ask not what your country can do for you"
ALLOWED_NUMERICS = {"single-row", "batch-invariant", "mixed", "native"}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir) -> str:
    """tiny.en as the suite keeps it (an int8 copy loads faster per run, but in a fresh cache it is
    made and self-tested first: about 15 s of CI, more than its five runs save)."""
    return str(tiny_model_dir)


@pytest.fixture(scope="module")
def jfk(shared_data):
    return shared_data / "real/audio/jfk.flac"


def _transcribe(model: str, audio, out_dir, *flags: str) -> int:
    return main(["transcribe", str(audio), "--model", model, "--threads", "2", "--language", "en",
                 "--output-dir", str(out_dir), *flags])


def _json_run(model: str, audio, out_dir, *flags: str) -> dict:
    assert _transcribe(model, audio, out_dir, "--output-format", "json", *flags) == 0
    return json.loads((out_dir / f"{audio.stem}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def words_json(tiny, jfk, tmp_path_factory) -> dict:
    return _json_run(tiny, jfk, tmp_path_factory.mktemp("words"), "--word-timestamps")


def _words(data: dict) -> list[dict]:
    return [w for s in data["segments"] for w in s["words"]]


def _srt_cues(text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each cue of an srt file."""
    cues = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        a, b = re.findall(r"(\d+):(\d+):(\d+),(\d+)", lines[1])
        cues.append((*(int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000 for h, m, s, ms in (a, b)),
                     "\n".join(lines[2:])))
    return cues


def test_word_timestamps_in_json_are_monotonic_within_segments(words_json):
    assert PHRASE in words_json["text"].lower().replace(",", "").replace(".", "")
    assert words_json["segments"] and words_json["beam_size"] == 1
    for seg in words_json["segments"]:
        words = seg["words"]
        assert words and "".join(w["word"] for w in words) == seg["text"]
        assert all(set(w) == {"start", "end", "word", "probability"} for w in words)
        assert all(0.0 <= w["probability"] <= 1.0 for w in words)
        assert all(seg["start_s"] <= w["start"] <= w["end"] <= seg["end_s"] for w in words)
        assert all(a["end"] <= b["start"] for a, b in zip(words, words[1:]))


def test_srt_cues_cut_by_max_words_per_line(tiny, jfk, tmp_path, words_json):
    assert _transcribe(tiny, jfk, tmp_path, "--word-timestamps", "--output-format", "srt",
                       "--max-words-per-line", "3") == 0
    cues = _srt_cues((tmp_path / "jfk.srt").read_text(encoding="utf-8"))
    assert all(len(text.split()) <= 3 for _, _, text in cues)
    expected = []  # the same decoding's words, three at a time within each segment
    for seg in words_json["segments"]:
        words = seg["words"]
        for i in range(0, len(words), 3):
            group = words[i:i + 3]
            expected.append((group[0]["start"], group[-1]["end"], "".join(w["word"] for w in group).strip()))
    assert len(cues) == len(expected) > 3
    for (a, b, text), (start, end, words) in zip(cues, expected):
        assert text == words and a == pytest.approx(start, abs=1e-3) and b == pytest.approx(end, abs=1e-3)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic: no temp file left


def _vtt_cues(text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each cue of a vtt file."""
    assert text.startswith("WEBVTT\n\n")
    srt_like = [f"0\n{block.replace('.', ',', 2)}" for block in text[len("WEBVTT\n\n"):].strip().split("\n\n")]
    return _srt_cues("\n\n".join(srt_like))


@pytest.mark.parametrize("seconds", [(0, 30), (190, 210)])
def test_words_timed_with_no_length_still_get_cues_of_their_own_time(tiny_engine, shared_data, seconds):
    """tiny.en times some words of the LJ passage with start == end (' differs' at 4.92 s, the next
    word starting there too; ' Paris,' at 200.66 s, a gap after it; on an AVX2-only EPYC ' Paris,' has a
    length, and a word before a gap is given none here): srt/vtt cues ended where they
    began, which WebVTT forbids and players skip. Each such cue now lasts (forward into the gap
    after it, else backward into the gap before it), overlaps neither neighbour, and no word is lost."""
    import soundfile as sf

    audio, rate = sf.read(shared_data / "longform/ljspeech_LJ001-0001_to_0032_concat.flac", dtype="float32")
    result = tiny_engine.transcribe(audio[seconds[0] * rate:seconds[1] * rate], language="en", word_timestamps=True)
    words = [w for s in result.segments if s.text.strip() for w in s.words]
    still = [w for w in words if round(w.end, 3) <= round(w.start, 3)]
    if not still:  # the kernels of an AVX2-only EPYC time ' Paris,' with a length: collapse a word before a gap
        still = [next(w for w, after in zip(words, words[1:]) if after.start - w.end > 0.3)]
        still[0].end = still[0].start
    for fmt, per_cue, parse in (("srt", 1, _srt_cues), ("vtt", 8, _vtt_cues)):
        cues = parse(render(result, fmt, cues=CueOptions(max_words_per_line=per_cue)))
        assert all(b > a for a, b, _ in cues), fmt
        assert all(b <= c for (_, b, _), (c, _, _) in zip(cues, cues[1:])), fmt  # none overlaps the next
        assert " ".join(t.replace("\n", " ") for _, _, t in cues).split() == "".join(w.word for w in words).split()
    cues = _srt_cues(render(result, "srt", cues=CueOptions(max_words_per_line=1)))
    for word in still:  # each at the time Whisper gave it, a few tenths of a second long
        a, b, _ = next(c for c in cues if c[2] == word.word.strip() and c[0] <= word.start + 1e-3 <= c[1] + 2e-3)
        assert 0 < b - a <= 0.3 + 1e-6


def test_beam_size_2_runs_beam_search(tiny, jfk, tmp_path):
    data = _json_run(tiny, jfk, tmp_path, "--beam-size", "2")
    assert data["numerics"] == "beam-search" and data["beam_size"] == 2
    assert {w["numerics"] for w in data["windows"]} == {"beam-search"}
    assert PHRASE in data["text"].lower().replace(",", "").replace(".", "")


def test_batch_size_does_not_change_tokens(tiny, jfk, tmp_path, capsys):
    runs = {n: _json_run(tiny, jfk, tmp_path / f"b{n}", "--batch-size", str(n), "--stats") for n in (1, 4)}
    err = capsys.readouterr().err
    assert runs[1]["tokens"] and runs[1]["tokens"] == runs[4]["tokens"]
    assert [runs[n]["batch_size"] for n in (1, 4)] == [1, 4]
    data = runs[4]
    assert PHRASE in data["text"].lower().replace(",", "").replace(".", "")
    # faster-whisper's batched VAD: chunks of up to 30 s, 160 ms of silence ends speech
    assert data["vad"]["max_speech_duration_s"] == 30 and data["vad"]["min_silence_duration_ms"] == 160
    assert 0 < data["duration_after_vad_s"] <= data["duration_s"] == pytest.approx(11.0, abs=0.01)
    assert data["numerics"] in ALLOWED_NUMERICS and data["stats"]["tokens"] > 0
    assert "numerics=" in err and "Ar=" in err


def test_vad_on_jfk(tiny, jfk, tmp_path, words_json):
    data = _json_run(tiny, jfk, tmp_path, "--vad", "--word-timestamps")
    assert PHRASE in data["text"].lower().replace(",", "").replace(".", "")
    assert data["vad"]["min_silence_duration_ms"] == 2000 and data["vad"]["max_speech_duration_s"] is None
    assert data["numerics"] in ALLOWED_NUMERICS and data["batch_size"] is None
    assert all(0 <= w["start"] <= w["end"] <= data["duration_s"] for w in _words(data))
    if data["duration_after_vad_s"] == data["duration_s"]:  # the VAD kept all of it: the same decoding
        assert data["tokens"] == words_json["tokens"]


def test_vad_over_a_long_file_decodes_with_timestamps(tiny, jfk, tmp_path):
    """jfk, 40 s of faint noise, jfk: the VAD joined 22 s of speech, and "auto" decided on those (no
    timestamps): one cue from 0 to 62 s over the silence, its text garbled (a helper as a user of
    openai-whisper's CLI). "auto" is the file's length now, and the second jfk's first segment starts
    at its speech, not at the end of the first jfk (it was timed a little before the join)."""
    import soundfile

    from specwhisper.audio import SAMPLE_RATE, load_audio

    speech = load_audio(jfk)
    noise = (np.random.default_rng(0).normal(0, 1, 40 * SAMPLE_RATE) * 1e-3).astype(np.float32)
    path = tmp_path / "gap.wav"
    soundfile.write(path, np.concatenate([speech, noise, speech]), SAMPLE_RATE, subtype="FLOAT")
    data = _json_run(tiny, path, tmp_path, "--vad")
    second = speech.size / SAMPLE_RATE + 40
    assert data["timestamps"] and data["duration_after_vad_s"] < 30 < data["duration_s"]
    assert all(s["end_s"] <= second + 0.5 or s["start_s"] >= second - 1.0 for s in data["segments"])
    assert " ".join(data["text"].lower().replace(",", "").replace(".", "").split()).count(PHRASE) == 2


@pytest.mark.parametrize("flags, where", [
    (["--batch-size", "-1"], "--batch-size"),
    (["--batch-size", "0"], "--batch-size"),
    (["--beam-size", "0"], "--beam-size"),
    (["--max-words-per-line", "3", "--output-format", "srt"], "--max-words-per-line"),
    (["--max-line-width", "20", "--output-format", "vtt"], "--max-line-width"),
    (["--word-timestamps", "--max-words-per-line", "0", "--output-format", "srt"], "--max-words-per-line"),
    (["--vad", "--vad-threshold", "1.5"], "--vad-threshold"),
    (["--vad-min-silence-ms", "100"], "--vad-min-silence-ms"),
])
def test_bad_values_give_one_clear_error(flags, where, jfk, tmp_path, capsys):
    rc = main(["transcribe", str(jfk), "--output-dir", str(tmp_path), *flags])  # fails before any model loads
    err = capsys.readouterr().err
    assert rc != 0 and err.startswith("error: ") and f"where: {where}" in err and "what to do:" in err
    assert "Traceback" not in err and not list(tmp_path.iterdir())
    if "--word-timestamps" not in flags and "max" in where:
        assert "add --word-timestamps" in err


def test_missing_vad_model_names_the_extra(monkeypatch, jfk, capsys):
    from specwhisper import vad

    monkeypatch.setattr(vad, "_model", None)
    monkeypatch.delenv(vad.MODEL_ENV, raising=False)
    monkeypatch.setattr(vad, "MODEL_PACKAGES", ("specwhisper_no_such_package",))
    assert main(["transcribe", str(jfk), "--vad"]) == 2
    err = capsys.readouterr().err
    assert "where: --vad" in err and "specwhisper[vad]" in err and "leave out --vad" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flags, message", [
    (["--beam-size", "0"], "--beam-size must be at least 1"),
    (["--batch-size", "x"], "invalid int value"),  # argparse's own error
])
def test_cli_process_exits_non_zero_without_traceback(flags, message, jfk):
    proc = subprocess.run([sys.executable, "-m", "specwhisper", "transcribe", str(jfk), *flags],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


# ---- the cue rules alone (no model) --------------------------------------------------------------
def _segment(start: float, texts: list[str]) -> Segment:
    words = [Word(start + i, start + i + 0.5, t, 0.9) for i, t in enumerate(texts)]
    return Segment(start, start + len(texts) - 0.5, "".join(texts), [], words)


def test_wrap_words_breaks_lines_between_words():
    assert wrap_words([" And", " so", " my", " fellow"], 12) == "And so my\nfellow"
    assert wrap_words([" Americans,", " ask"], 4) == "Americans,\nask"  # a long word: a line of its own
    assert wrap_words([" one", " two"], None) == "one two"


def test_cues_by_words_and_width():
    segments = [_segment(0.0, [" a", " b", " c", " d", " e"]), _segment(10.0, [" f", " g"])]
    by_words = list(iter_cues(segments, CueOptions(max_words_per_line=2)))
    assert by_words == [(0.0, 1.5, "a b"), (2.0, 3.5, "c d"), (4.0, 4.5, "e"), (10.0, 11.5, "f g")]
    by_width = list(iter_cues(segments, CueOptions(max_line_width=4)))  # one cue per segment, lines wrapped
    assert by_width == [(0.0, 4.5, "a b\nc d\ne"), (10.0, 11.5, "f g")]
    both = list(iter_cues(segments, CueOptions(max_line_width=2, max_words_per_line=3)))
    assert both[0] == (0.0, 2.5, "a\nb\nc") and len(both) == 3
    plain = list(iter_cues(segments, CueOptions()))
    assert plain == [(0.0, 4.5, "a b c d e"), (10.0, 11.5, "f g")]
    no_words = Segment(20.0, 21.0, " h i", [], None)  # nothing aligned: the segment's own cue
    assert list(iter_cues([no_words], CueOptions(max_words_per_line=1))) == [(20.0, 21.0, "h i")]


def _cue(start: float, end: float, text: str) -> Segment:
    """A segment of one word timed ``start``-``end``."""
    return Segment(start, max(start, end), text, [], [Word(start, end, text, 0.9)])


def test_zero_length_word_cues_take_time_from_the_gaps_beside_them():
    one = CueOptions(max_words_per_line=1)
    gap_after = [_cue(1.0, 2.0, " a"), _cue(3.0, 3.0, " b"), _cue(5.0, 6.0, " c")]
    assert subtitle_cues(_transcript(gap_after), one)[1] == (3.0, 3.3, "b")  # MIN_CUE_S forward
    short_gap = [_cue(1.0, 2.0, " a"), _cue(3.0, 3.0, " b"), _cue(3.1, 4.0, " c")]
    assert subtitle_cues(_transcript(short_gap), one)[1] == (3.0, 3.1, "b")  # up to the next cue
    next_touches = [_cue(1.0, 2.0, " a"), _cue(3.0, 3.0, " b"), _cue(3.0, 4.0, " c")]
    assert subtitle_cues(_transcript(next_touches), one)[1] == (2.7, 3.0, "b")  # backward instead
    both_touch = [_cue(1.0, 3.0, " a"), _cue(3.0, 3.0, " b"), _cue(3.0, 3.0, " c"), _cue(3.0, 4.0, " d")]
    assert subtitle_cues(_transcript(both_touch), one) == [(1.0, 3.0, "a"), (3.0, 4.0, "b\nc\nd")]
    at_the_end = [_cue(1.0, 3.0, " a"), _cue(3.0, 3.0, " b")]  # the media ends there: joins the previous cue
    assert subtitle_cues(_transcript(at_the_end, duration_s=3.0), one) == [(1.0, 3.0, "a\nb")]
    past_the_end = [_cue(1.0, 2.0, " a"), _cue(7.0, 8.0, " b")]  # clamped to the media's end, then lengthened
    assert subtitle_cues(_transcript(past_the_end, duration_s=5.0), one) == [(1.0, 2.0, "a"), (4.7, 5.0, "b")]
    rounds_to_nothing = [_cue(1.0, 1.0004, " a"), _cue(2.0, 3.0, " b")]  # the files write whole ms
    assert subtitle_cues(_transcript(rounds_to_nothing), one)[0] == (1.0, 1.3, "a")
    group = Segment(0.0, 2.0, " x y z", [], [Word(0.0, 1.0, " x", 0.9), Word(2.0, 2.0, " y", 0.9),
                                             Word(2.0, 2.0, " z", 0.9)])
    assert subtitle_cues(_transcript([group]), CueOptions(max_words_per_line=2)) == [(0.0, 2.0, "x y"),
                                                                                      (2.0, 2.3, "z")]
    vtt = render(_transcript(next_touches), "vtt", cues=one)
    assert "00:00:02.700 --> 00:00:03.000\nb\n" in vtt
    assert MIN_CUE_S == 0.3 and lengthen_cues([]) == []


def _transcript(segments: list[Segment], duration_s: float | None = None):
    """A transcript of ``segments`` as the writers read it (no ``duration_s`` where None)."""
    class Transcript:
        text = "".join(s.text for s in segments)

        def to_dict(self) -> dict:
            return {"text": self.text, "segments": [s.to_dict() for s in segments]}

    Transcript.segments = segments
    if duration_s is not None:
        Transcript.duration_s = duration_s
    return Transcript()


def test_vtt_and_json_render_words():
    class Transcript:
        text = "a b c"
        segments = [_segment(0.0, [" a", " b", " c"])]

        def to_dict(self) -> dict:  # as Result's and FwTranscript's: segments as Segment.to_dict gives them
            return {"text": self.text, "segments": [s.to_dict() for s in self.segments]}

    vtt = render(Transcript(), "vtt", cues=CueOptions(max_words_per_line=2))
    assert vtt == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\na b\n\n00:00:02.000 --> 00:00:02.500\nc\n\n"
    data = json.loads(render(Transcript(), "json"))
    assert data["segments"][0]["words"][1] == {"start": 1.0, "end": 1.5, "word": " b", "probability": 0.9}
    Transcript.segments = [Segment(0.0, 1.0, " a", [], None)]
    assert "words" not in json.loads(render(Transcript(), "json"))["segments"][0]


def test_cues_end_with_the_audio():
    """Whisper may time a last segment past the audio's end (longform.flac, 150.19 s: a cue to
    150.64 s; a 47 s file: to 48.42 s): a subtitle ends with its media."""
    class Transcript:
        text = "a b"
        segments = [Segment(0.0, 40.0, " a", [], None), Segment(40.0, 48.42, " b", [], None)]
        duration_s = 47.0

        def to_dict(self) -> dict:
            return {"text": self.text, "duration_s": self.duration_s, "segments": [s.to_dict() for s in self.segments]}

    srt = render(Transcript(), "srt")
    assert "00:00:40,000 --> 00:00:47,000\nb" in srt and "48,420" not in srt
    assert json.loads(render(Transcript(), "json"))["segments"][1]["end_s"] == 48.42  # the data stays Whisper's


def test_no_speech_and_log_prob_thresholds_reach_the_decoding(tiny, jfk, tmp_path, monkeypatch, capsys):
    """openai-whisper's and faster-whisper's no-speech rule had no flag (a helper as a user of
    openai-whisper's CLI: noise before speech became "You're right."): both thresholds reach the
    engine, with --vad too, and a bad value fails before the model loads."""
    from specwhisper import WhisperEngine
    from specwhisper.cli import build_parser
    from specwhisper.cli_fw import _fw_kwargs

    seen = {}
    real = WhisperEngine.transcribe

    def spy(self, audio, **options):
        seen.update(options)
        return real(self, audio, **options)

    monkeypatch.setattr(WhisperEngine, "transcribe", spy)
    assert _transcribe(tiny, jfk, tmp_path, "--no-speech-threshold", "0.6", "--log-prob-threshold", "-1") == 0
    assert seen["no_speech_threshold"] == 0.6 and seen["log_prob_threshold"] == -1.0
    args = build_parser().parse_args(["transcribe", str(jfk), "--vad", "--no-speech-threshold", "0.5"])
    fw = _fw_kwargs(args)
    assert fw["no_speech_threshold"] == 0.5 and fw["log_prob_threshold"] is None
    monkeypatch.setattr(WhisperEngine, "__init__", lambda *a, **k: pytest.fail("loaded a model for a bad value"))
    assert main(["transcribe", str(jfk), "--model", tiny, "--no-speech-threshold", "nan"]) == 2
    assert "no_speech_threshold" in capsys.readouterr().err
