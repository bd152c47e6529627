"""Live streaming (issue 20): LocalAgreement passes over a growing buffer, each drafted by the pass before.

Every pass must give the tokens that the same pass (same buffer, prompt and forced prefix) gives
with speculation off in the same numerics, whatever the previous pass drafted (true, shuffled,
corrupted, another language). The stream's committed text must match offline transcription
closely, never go back, keep its times in order, and keep its buffer bounded.
Model: tiny.en int8 (2 threads), base for the text against offline; the file takes about 2 min on 2 cores.
"""

from __future__ import annotations

import json
import random
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.errors import AudioError, OptionError, SpecWhisperError
from specwhisper.live import EMPTY_KEEP_S, decode_pass
from specwhisper.live_agreement import agreed_length, copies_prompt, cut_repetition, inner_loop

LONGFORM = "longform/longform.flac"
SAMPLE = Path(__file__).resolve().parents[1] / "engine" / "samples" / "morning.flac"
EXACT_S = 24.0  # the stretch of the long-form file streamed for the exactness and drafting checks
# The stretches of the long-form file streamed against offline transcription: 33 s (2 sentences around
# a digit list; base on the AVX2 EPYC: stream and offline WER 0.073, 41 s of the suite's time at 53 s,
# 26 s at 33 s) in the README's run, 80 s (4 sentences, 3 digit lists) with -m full: the junction of two
# digit lists, where a pass once looped (test_a_loop_followed_by_more_text_is_cut_after_its_second_copy),
# streams end to end with -m full only.
WER_S = 33.0
WER_S_FULL = 80.0
# The committed text's WER against the reference (base, the default model, on the invariant
# decoder): at most offline's + 6 pp, and at most 15 %. Measured on 80 s: stream 8.1 %, offline
# 10.4 %; on 53 s: 9.9 / 7.4 % (its step graph's linears as MatMulNBits nodes; before that graph
# 11.9 / 6.7 % on 80 s; with it and looping passes still allowed to commit, 23.7 %: two looping
# passes agreed on "1, 2, 3, 6" and a sentence was lost): the stream loses digits at list
# junctions. tiny.en there: stream 20.7 %, offline 16.3 % (a loop of "please" at a list's end and
# the sentence after it lost); on the fork's kernels its stream gave 6.7 % and offline 77 % (a loop
# on the last list): a stretch of near-ties either way.
WER_MARGIN, WER_BOUND = 0.06, 0.15
DRAFT_LEN = 2
HINT_ACCEPT_FLOOR = 0.35  # previous-pass drafts accepted on the EXACT_S stretch (invariant decoder, K = 2): 0.41
CALLS_VS_GREEDY = 0.8  # decoder calls with previous-pass drafts / without speculation: 0.55


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from specwhisper import WhisperEngine

    # Pinned decoder and draft length: the engine's own choices follow call prices measured on the
    # machine (a busy CI box chose the fork's kernels and shorter drafts, and other near-ties). The
    # encoder is the engine's own choice (on the Xeon OpenVINO's: this file took 112 s on
    # CTranslate2's encoder, 58 s on it; every figure below held on both).
    # tiny.en's float16 weights loaded as int8: the same int8 model as the store's tiny.en-int8
    # (test_ct2_quantize.py), and the suite's other tiny.en engines measured it already (a second copy
    # was measured again from scratch: self-tests, graphs and encoders, about a minute of CI).
    return WhisperEngine(tiny_model_dir, compute_type="int8", threads=2, encoder="auto", batch_decoder="invariant")


@pytest.fixture(scope="module")
def longform(shared_data) -> np.ndarray:
    return load_audio(shared_data / LONGFORM)


def _run(engine, audio: np.ndarray, chunk_s: float = 1.0, **options):
    """Stream ``audio`` in chunks; returns (events, pass records, stream)."""
    records = []
    # A fixed draft length: the adaptive one follows call prices measured on the machine, and the
    # drafting figures asserted below with it (acceptance 0.40 or 0.34 as the prices moved).
    options = {"numerics": "batch-invariant", "draft_len": DRAFT_LEN, **options}
    stream = engine.stream("en", on_pass=records.append, **options)
    step = round(chunk_s * SAMPLE_RATE)
    events = list(stream.events(audio[i:i + step] for i in range(0, audio.size, step)))
    return events, records, stream


@pytest.fixture(scope="module")
def exact_run(engine, longform):
    """The first EXACT_S seconds streamed with previous-pass drafts, in batch-invariant numerics."""
    return _run(engine, longform[:round(EXACT_S * SAMPLE_RATE)], numerics="batch-invariant")


@pytest.fixture(scope="module")
def greedy_run(engine, longform):
    """The same stretch streamed without speculation: each of its passes is the oracle of the drafted
    stream's pass of the same index (the same tokens make the same next buffer and options)."""
    return _run(engine, longform[:round(EXACT_S * SAMPLE_RATE)], numerics="batch-invariant", speculation=False)


def _committed(events) -> str:
    return "".join(e.text for e in events if e.kind == "commit")


def _oracle(engine, record) -> list[int]:
    window, _ = decode_pass(engine, record.audio, **{**record.options, "speculation": False, "draft_hint": (),
                                                     "numerics": record.numerics})
    return list(window.tokens)


# -- the agreement rule (no model) ---------------------------------------------------------------
def test_agreement_commits_the_common_prefix_up_to_a_word_boundary():
    tb = 1000
    words = {1: True, 2: True, 3: False, 4: True, 5: True}  # 3 continues the word before it

    def starts(t):
        return t >= tb or words.get(t, True)

    assert agreed_length([tb, 1, 2, 4], None, 0, tb, starts) == 0  # one pass agrees with nothing
    assert agreed_length([tb, 1, 2, 4], [tb, 1, 2, 5], 0, tb, starts) == 3  # up to where they differ
    assert agreed_length([tb, 1, 2, 3], [tb, 1, 2, 4], 0, tb, starts) == 2  # "2" may go on as "2 3": held back
    assert agreed_length([tb, 1, 2, tb + 5], [tb + 1, 1, 2, tb + 6, 4], 0, tb, starts) == 4  # timestamps agree
    assert agreed_length([tb, 1, 2], [tb, 1, 2], 0, tb, starts) == 3  # both passes ended: done
    assert agreed_length([tb, 1, 2], [tb, 9], 2, tb, starts) == 2  # never below the forced prefix


def test_a_looping_tail_is_cut_after_its_first_copy():
    assert cut_repetition([1, 2, 3, 7, 5, 7, 5, 7, 5, 7]) == [1, 2, 3, 7, 5]  # "seven, seven, seven, ..."
    assert cut_repetition([1, 9, 9, 9, 9]) == [1, 9]
    assert cut_repetition([7, 5, 7, 5]) == [7, 5, 7, 5]  # two copies may be speech
    assert cut_repetition([1, 2, 3, 4]) == [1, 2, 3, 4]


def test_a_loop_followed_by_more_text_is_cut_after_its_second_copy():
    """base on an AVX2-only EPYC: "three, four," three times, then the next sentence (two passes
    agreed on it, and the 53 s stream's WER was 0.148 against 0.074 with the cut)."""
    three_four, sentence = [20, 11, 21, 11], [50, 51, 52]
    assert inner_loop(three_four * 3 + sentence, 0) == 8
    assert inner_loop([1] + three_four * 2 + sentence, 0) is None  # twice may be speech
    assert inner_loop([9, 9, 9, 9, 9, 9] + sentence, 0) is None  # a repeated word: digit lists say that
    assert inner_loop(three_four * 3 + sentence, 12) is None  # committed before the pass began: not this pass's loop
    assert inner_loop(three_four * 3 + sentence, 11) == 8


def test_a_pass_that_copies_its_prompt_is_found():
    prompt = list(range(100, 130))
    assert copies_prompt(prompt[5:15], prompt)  # ten tokens of the prompt in a row
    assert copies_prompt([1, 2] + prompt[:8], prompt)
    assert not copies_prompt(prompt[:7] + [1] + prompt[7:14], prompt)  # no run of 8
    assert not copies_prompt(prompt[:8], [])  # no prompt, nothing to copy


# -- bad input -----------------------------------------------------------------------------------
def test_bad_input_gives_clear_errors(engine):
    stream = engine.stream("en")
    audio = np.zeros(1600, np.float32)
    cases = [(audio.astype(np.int32), "dtype int32"), (np.zeros((1600, 2), np.float32), "mono"),
             (np.full(1600, np.nan, np.float32), "NaN"), ([0.0] * 10, "type list")]
    for chunk, what in cases:
        with pytest.raises(AudioError) as info:
            stream.feed(chunk)
        assert what in info.value.what and info.value.where.startswith("LiveStream.feed") and info.value.hint
    assert stream.time_s == 0  # refused chunks leave the stream as it was ...
    stream.feed(audio)
    stream.feed(audio[:400].astype(np.float64))  # what soundfile.read gives: converted
    stream.feed(np.zeros(800, np.int16))
    stream.feed(b"\x00\x00\x00")  # ... int16 PCM bytes, an odd byte kept for the next chunk
    assert stream.time_s == (1600 + 400 + 800 + 1) / SAMPLE_RATE
    assert stream.finish() == [] and stream.finish() == []
    with pytest.raises(SpecWhisperError, match="finished") as info:
        stream.feed(audio)
    assert info.value.hint
    for kwargs, where in (({"step_s": 0}, "step_s"), ({"step_s": "1"}, "step_s"), ({"timestamps": "off"}, "timestamps"),
                          ({"word_timestamps": True}, "word_timestamps"),
                          ({"hallucination_silence_threshold": 2.0}, "hallucination_silence_threshold"), ({"numerics": "fast"}, "numerics (--numerics)")):
        with pytest.raises(SpecWhisperError) as info:
            engine.stream("en", **kwargs)
        assert info.value.where == where
    with pytest.raises(AudioError, match="16 kHz"):
        engine.stream("en", sample_rate=8000)
    assert engine.stream("en", step_s=7.6).finish() == []  # was refused for a max_buffer_s never given
    with pytest.raises(OptionError, match="max_buffer_s"):
        engine.stream("en", step_s=7.6, max_buffer_s=15)
    with pytest.raises(OptionError, match="draft_hint"):
        engine.transcribe(audio, draft_hint="abc")
    for name, value in (("batch_size", 8), ("scores", False)):  # were accepted, then warned or overridden
        with pytest.raises(OptionError, match=f"{name} is not an option of a live stream"):
            engine.stream("en", **{name: value})


def test_a_microphone_without_portaudio_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """sounddevice installed (the mic extra) on a system without PortAudio raises OSError as it is
    imported: ``stream mic`` and ``listen mic`` ended in its traceback."""
    import sys

    from specwhisper.cli import main

    (tmp_path / "sounddevice.py").write_text("raise OSError('PortAudio library not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    for command in ("stream", "listen"):
        assert main([command, "mic"]) == 2
        err = capsys.readouterr().err
        assert "PortAudio" in err and "libportaudio2" in err and "Traceback" not in err


def test_cli_stream_json_lines_and_missing_microphone(engine, shared_data, capsys, tmp_path):
    from specwhisper.cli import main

    path = shared_data / "real/audio/jfk.flac"
    assert main(["stream", str(path), "--model", str(engine.model_dir), "--threads", "2", "--language", "en",
                 "--output-format", "json", "--stats"]) == 0
    out = capsys.readouterr()
    events = [json.loads(line) for line in out.out.splitlines()]
    assert {e["type"] for e in events} == {"commit", "tentative"} and "passes" in out.err
    text = "".join(e["text"] for e in events if e["type"] == "commit")
    assert "ask not what your country can do for you" in text.lower()
    assert "endpointing vad" in out.err and "0 utterance ends" in out.err  # jfk's pauses end none: 0.8 s of non-speech do
    # a token map on the command line too (README: it sets the stream's language); it drafts, losslessly
    from specwhisper.tokenmap import build_token_map

    tmap = build_token_map(["Ask not what your country can do for you."] * 3, engine.tokenizer).save(
        tmp_path / "jfk.tmap")
    assert main(["stream", str(path), "--model", str(engine.model_dir), "--threads", "2", "--tokenmap", str(tmap),
                 "--output-format", "json", "--endpointing", "off"]) == 0
    mapped = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "ask not what your country" in "".join(e["text"] for e in mapped if e["type"] == "commit").lower()
    try:
        import sounddevice  # noqa: F401
    except ImportError:
        assert main(["stream", "mic"]) == 2
        assert "sounddevice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stream", str(path), "--step", "12"])
    assert "--step: must be seconds from 0.1 to 10" in capsys.readouterr().err
    # a fixed draft length as transcribe and listen take it: 0 drafts nothing, a bad one fails before the load
    # (batch-invariant, where the previous pass drafts jfk's passes by default: 0 must reach them)
    assert main(["stream", str(path), "--model", str(engine.model_dir), "--threads", "2", "--language", "en",
                 "--numerics", "batch-invariant", "--draft-len", "0", "--stats"]) == 0
    assert "previous-pass drafts 0/0 accepted" in capsys.readouterr().err
    assert main(["stream", str(path), "--model", "no-such-model", "--draft-len", "17"]) == 2
    assert "draft_len (--draft-len)" in capsys.readouterr().err


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_in_the_stream_command_still_commits_what_was_heard(engine, shared_data, capsys, monkeypatch, stop):
    """Ctrl-C is how a microphone stream ends: what was heard and not yet committed is decoded
    and committed, as at the end of a file (it was dropped with "interrupted"). A service
    manager's stop (SIGTERM) ends it alike (it lost the tail, and ``listen`` its learned map).
    Not a real SIGTERM to the test process: after some 350 tests an AVX2-only EPYC's run died of
    SIGSEGV (SI_KERNEL: the signal's frame could not be set up) delivering it; real signals to the
    CLI are sent to subprocesses in ``test_cli_faults``."""
    import signal

    import specwhisper.cli_stream as cli_stream
    from specwhisper.cli import main

    audio = load_audio(shared_data / "real/audio/jfk.flac")

    def interrupted_source(*_):
        yield audio[:round(10.5 * SAMPLE_RATE)]
        if stop == "sigterm":  # main's handler, called as the signal would call it in the main thread
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler), "the stream command installed no SIGTERM handler"
            handler(signal.SIGTERM, None)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_stream, "audio_source", interrupted_source)
    assert main(["stream", "mic", "--model", str(engine.model_dir), "--language", "en",
                 "--output-format", "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "for your country" in "".join(e["text"] for e in events if e["type"] == "commit").lower()

    import specwhisper.live as live

    def interrupted_last_pass(self, final=False):
        if final:
            raise KeyboardInterrupt
        return []

    if stop == "ctrl-c":
        monkeypatch.setattr(live.LiveStream, "_pass", interrupted_last_pass)  # Ctrl-C in the last pass itself
        assert main(["stream", "mic", "--model", str(engine.model_dir), "--language", "en"]) == 130
        assert "interrupted" in capsys.readouterr().err


def test_an_interrupted_feed_or_finish_loses_nothing_it_committed(engine, longform, monkeypatch):
    """A notebook's stop button (KeyboardInterrupt) inside ``feed`` or ``finish``: the passes that
    ended before it keep their commits for the next call, ``finish`` runs what the feed left a step
    at a time, and an interrupted ``finish`` is completed by calling it again (a helper in a
    notebook lost the JFK sentence both ways)."""
    import specwhisper.live as live

    decode, calls = live.LiveStream._decode, []

    def interrupted(self, buffer):
        calls.append(buffer.size)
        if len(calls) in stops:
            raise KeyboardInterrupt
        return decode(self, buffer)

    monkeypatch.setattr(live.LiveStream, "_decode", interrupted)
    stops = (12,)  # a pass in the middle of one long feed
    stream = engine.stream(language="en")
    with pytest.raises(KeyboardInterrupt):
        stream.feed(longform[:30 * SAMPLE_RATE])
    committed = "".join(e.text for e in stream.finish() if e.kind == "commit").lower()
    assert "fellow americans" in committed and "for your country" in committed and "quilter" in committed
    assert max(calls) <= 16 * SAMPLE_RATE  # a step a pass (buffers of up to 15 s), not the rest at once

    calls.clear()
    stops = (1,)  # the last pass itself
    stream = engine.stream(language="en", step_s=8.0, endpointing="off")
    assert stream.feed(longform[:7 * SAMPLE_RATE]) == []
    with pytest.raises(KeyboardInterrupt):
        stream.finish()
    committed = "".join(e.text for e in stream.finish() if e.kind == "commit").lower()
    assert "fellow americans" in committed and stream.finish() == []
    with pytest.raises(SpecWhisperError):
        stream.feed(longform[:SAMPLE_RATE])


def test_a_last_pass_that_loops_commits_only_what_the_pass_before_said(engine, longform, monkeypatch):
    """``finish()`` commits all its last pass hears, unless that pass looped or copied its prompt
    (base on half a second after the last sentence wrote the committed sentence again), or was
    unsure on less than a second of audio (base said "Bye." at -0.86 on the breath after jfk's last
    word at 0.3 s steps): then only what the pass before said too. The passes are fixed here; the
    tokens are words of the file."""
    tb = engine.tokenizer.special.timestamp_begin
    said, copy = engine.tokenizer.encode(" one two"), engine.tokenizer.encode(" three three")
    for doubt, seconds, step, expected in (("", 2, 1.0, "three three"), ("looped", 2, 1.0, ""),
                                           ("looped", 0.5, 1.0, "one two three three"),
                                           ("unsure", 0.6, 0.3, ""), ("unsure", 2, 1.0, "three three"),
                                           ("no-speech", 0.5, 1.0, "")):
        stream = engine.stream("en", step_s=step, endpointing="off")  # every step decoded, as the rules assume

        def fake_pass(buffer, stream=stream, doubt=doubt):
            final = stream._finished
            stream._looped_pass = final and doubt == "looped"
            stream._unsure = final and bool(doubt)
            stream._no_speech = final and doubt == "no-speech"  # even a stream's only pass commits nothing
            return [tb] + said + (copy if final else [])

        monkeypatch.setattr(stream, "_decode", fake_pass)
        audio = longform[:round(seconds * SAMPLE_RATE)]
        fed = [e for i in range(0, audio.size, SAMPLE_RATE) for e in stream.feed(audio[i:i + SAMPLE_RATE])]
        assert _committed(fed).strip() == ("one two" if seconds >= 2 * step else "")
        # a single pass (no pass before it) commits what it heard, as before
        assert _committed(stream.finish()).strip() == expected


def test_a_last_pass_that_ends_its_text_before_speech_does_decodes_the_rest(engine):
    """A last pass whose text ends (a segment end, then the end of text) while at least a second
    of speech follows keeps that rest and decodes it in another last pass, with what it committed
    forced: tiny.en's last pass over the bundled sample (a 44.1 kHz WAV on stdin) ended after
    "play some" at 6.72 s of 8.5, and " jazz in the living room." was lost. Another last pass
    comes only after one that committed words and trimmed the buffer, at most ``REST_PASSES``
    times, and none where the rest holds no speech. The passes are fixed here; the audio (and
    its speech, as the VAD hears it) is the sample's."""
    from specwhisper.live import REST_PASSES

    tb = engine.tokenizer.special.timestamp_begin
    audio = load_audio(SAMPLE)
    said, rest = engine.tokenizer.encode(" and play some"), engine.tokenizer.encode(" jazz in the living room.")
    for case, end, passes, expected in (("rest", 336, 2, "and play some jazz in the living room."),
                                        ("nothing more", 336, 2, "and play some"),
                                        ("early again", 336, 1 + REST_PASSES, "and play some" + " jazz" * REST_PASSES),
                                        ("no speech after", 404, 1, "and play some")):
        stream = engine.stream("en", step_s=10.0, endpointing="off")  # one pass: the last, over the sample
        calls = []

        def fake_pass(buffer, stream=stream, calls=calls, case=case, end=end):
            calls.append((buffer.size, list(stream._prefix)))
            prefix = list(stream._prefix)
            if len(calls) == 1:
                return [tb] + said + [tb + end]  # then the end of text
            if case == "nothing more":
                return prefix
            if case == "early again":  # a word, and the end of text a little further on, every time
                return prefix + rest[:1] + [prefix[-1] + 2]
            return prefix + rest + [tb + 404]

        stream._decode = fake_pass
        assert stream.feed(audio) == []
        events = stream.finish()
        assert _committed(events).strip() == expected, case
        assert len(calls) == passes and stream.totals["rest_passes"] == passes - 1, case
        if passes > 1:  # the same audio, with what was committed forced and a segment starting after it
            assert calls[1] == (calls[0][0], [tb] + said + [tb + end] * 2)
        commits = [e for e in events if e.kind == "commit" and e.text]
        assert commits[0].end_s == pytest.approx(end * 0.02) and commits[0].segment_end
        assert all(a.end_s <= b.start_s for a, b in zip(commits, commits[1:]))


def test_the_words_after_a_last_pass_that_ended_early_are_committed(engine):
    """The sample sent as a 44.1 kHz stereo WAV (``specwhisper stream -``: mixed down and
    resampled as stdin's audio is): on an AMD EPYC (AVX2) tiny.en's last pass ended its text after
    "play some" (6.72 s of 8.5), and the stream lost the words after them (the passes before had
    heard " task in the living room."); its last pass decodes them again now."""
    import io

    import soundfile as sf
    import soxr

    from specwhisper.pipe_audio import pipe_chunks

    x44 = soxr.resample(load_audio(SAMPLE), SAMPLE_RATE, 44100, quality="HQ")
    wav = io.BytesIO()
    sf.write(wav, np.stack([x44, x44], axis=1), 44100, subtype="PCM_16", format="WAV")
    stream = engine.stream("en", numerics="batch-invariant", draft_len=DRAFT_LEN)
    committed = _committed(stream.events(pipe_chunks(io.BytesIO(wav.getvalue())))).lower()
    assert "play some" in committed and "living room" in committed, committed


# -- silence: free and bounded -------------------------------------------------------------------
def test_hours_of_silence_cost_nothing_and_keep_the_clock(engine, shared_data):
    stream = engine.stream("en")
    ten_s = np.zeros(10 * SAMPLE_RATE, np.float32)
    tracemalloc.start()
    t0 = time.perf_counter()
    for _ in range(360):  # one hour
        assert stream.feed(ten_s) == []
        assert stream.buffer_s <= 1.0
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert stream.totals["passes"] == 0 and seconds < 10 and peak < 8 * 2**20
    speech = load_audio(shared_data / "real/audio/jfk.flac")
    events = list(stream.feed(speech)) + stream.finish()
    commits = [e for e in events if e.kind == "commit"]
    # "ask" or "asked": a near-tie of tiny.en's that the second of zeros kept before the speech
    # (the gate's lead) tips to "asked"; dropping zeros from the lead tipped longform.flac's digit
    # lists instead (10.5 -> 14.5 % WER, RESULTS_live.md)
    assert "not what your country" in _committed(events).lower()
    assert commits[0].start_s >= 3600 - EMPTY_KEEP_S and commits[-1].end_s <= 3600 + speech.size / SAMPLE_RATE + 0.5


def _room(seconds: float, seed: int, db: float = -50.0) -> np.ndarray:
    """White noise at ``db`` dBFS: a quiet room (not digital silence, which is skipped anyway)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * SAMPLE_RATE)) * 10 ** (db / 20)).astype(np.float32)


# The energy gate (6 s here) with -m full: the README's run gates room noise on it below, and
# test_listen's command mode ends utterances on it
@pytest.mark.parametrize("endpointing", ["vad", pytest.param("energy", marks=pytest.mark.full)])
def test_no_pass_decodes_the_room_around_speech_and_no_text_is_written_into_it(engine, shared_data, endpointing):
    """On a quiet room after jfk's last word tiny.en wrote " Thank you." (base " I am very proud of
    you.") and committed it; before the speech the buffer filled with "." passes. With the speech
    gate nothing but the speech (and its pad) is decoded, and the utterance ends once
    ``silence_s`` of non-speech followed it."""
    from benchmarks.metrics import edit_distance

    speech = load_audio(shared_data / "real/audio/jfk.flac")
    lead, tail = 5.0, 8.0
    speech_end = lead + speech.size / SAMPLE_RATE
    events, records, stream = _run(engine, np.concatenate([_room(lead, 1), speech, _room(tail, 2)]),
                                   endpointing=endpointing)
    offline = _words(engine.transcribe(speech, language="en", numerics="batch-invariant").text)
    committed = _words(_committed(events))
    assert stream.endpointing == endpointing
    assert len(committed) <= len(offline) and edit_distance(offline, committed) <= 1, (committed, offline)
    assert all(e.start_s < speech_end for e in events if e.kind == "commit" and e.text.strip())
    assert stream.totals["utterance_ends"] == 1 and stream.totals["gated_s"] >= lead + tail - 3
    assert all(lead - EMPTY_KEEP_S - 0.5 <= r.offset_s < speech_end for r in records)  # no pass on the room alone
    off = engine.stream("en", endpointing="off")
    assert off.endpointing == "off" and off._gate is None


@pytest.mark.parametrize("endpointing", ["vad", "energy"])
def test_minutes_of_room_noise_cost_no_pass(engine, endpointing):
    stream = engine.stream("en", endpointing=endpointing)
    room = _room(120, 3)
    for i in range(0, room.size, SAMPLE_RATE // 2):
        assert [e for e in stream.feed(room[i:i + SAMPLE_RATE // 2]) if e.text] == []
        assert stream.buffer_s <= EMPTY_KEEP_S + 1.0
    assert not _committed(stream.finish())
    assert stream.totals["passes"] == 0 and stream.totals["gated_s"] >= 119


def test_a_segment_start_left_open_does_not_let_the_room_in(engine):
    """Two passes agree on a segment's end and the buffer is trimmed there; the pass's next
    segment start stays as the open prefix (a timestamp, no text). The gate looked only for an
    empty prefix, so from then on every second of the room was decoded and what Whisper made of it
    (" Thank you.") could be committed. The passes are fixed here: 1.5 s of tone, then a quiet room."""
    tok = engine.tokenizer
    tb = tok.special.timestamp_begin
    t = np.arange(round(1.5 * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
    audio = np.concatenate([0.1 * np.sin(2 * np.pi * 300 * t), _room(8, 6, -70)])
    stream = engine.stream("en", endpointing="energy")
    passes = []

    def fake_pass(buffer):
        passes.append(stream._offset)
        end = tb + round(buffer.size / SAMPLE_RATE / 0.02) - 1  # a segment end near the buffer's end
        return [tb] + tok.encode(" Hello.") + [end, end] + tok.encode((" Thank you.", " Bye.")[len(passes) % 2])

    stream._decode = fake_pass
    events = list(stream.events(audio[i:i + SAMPLE_RATE] for i in range(0, audio.size, SAMPLE_RATE)))
    assert _committed(events).strip() == "Hello." and len(passes) <= 3
    assert stream.totals["gated_s"] >= 6


def test_the_speech_gate_answers_alike_however_the_audio_is_chunked():
    """Energy frames: 1 s of a quiet room, 1 s of a loud tone, 1 s of room; the gate's speech run,
    padded, and the silence after it, with the audio pushed whole or in odd pieces."""
    from specwhisper.live_gate import SpeechGate
    from specwhisper.vad import FRAME

    t = np.arange(SAMPLE_RATE, dtype=np.float32) / SAMPLE_RATE
    audio = np.concatenate([_room(1, 4, -70), 0.1 * np.sin(2 * np.pi * 300 * t), _room(1, 5, -70)])
    pad = round(0.2 * SAMPLE_RATE)
    answers = []
    for sizes in ([audio.size], [100, 5000, 17, 30000], [FRAME] * (audio.size // FRAME + 1)):
        gate, at = SpeechGate("energy", pad), 0
        for size in sizes * (audio.size // sum(sizes) + 1):
            gate.push(audio[at:at + size])
            at += size
        answers.append((gate.speech_start(0, audio.size), gate.speech_end(0, audio.size),
                        gate.silence_after_speech(audio.size), gate.speech_start(2 * SAMPLE_RATE + pad + FRAME, audio.size)))
    assert answers[0] == answers[1] == answers[2]
    start, end, silence, after = answers[0]
    assert abs(start - (SAMPLE_RATE - pad)) <= FRAME and abs(end - (2 * SAMPLE_RATE + pad)) <= FRAME
    assert abs(silence - SAMPLE_RATE) <= 2 * FRAME and after is None
    gate.forget_before(end)
    assert gate.speech_start(0, audio.size) is None


def test_speech_gate_options_are_checked(engine, capsys):
    from specwhisper.cli import main

    for kwargs, where in (({"endpointing": "loud"}, "endpointing"), ({"silence_s": 0}, "silence_s (--silence-ms"),
                          ({"pad_s": -1}, "pad_s"), ({"vad_threshold": 2}, "vad_threshold")):
        with pytest.raises(OptionError) as info:
            engine.stream("en", **kwargs)
        assert info.value.where.startswith(where) and info.value.hint
    assert main(["stream", "nothing.wav", "--model", "no-such-model", "--silence-ms", "20"]) == 2  # before the model
    assert "silence_s" in capsys.readouterr().err


# -- exactness -----------------------------------------------------------------------------------
def test_every_pass_equals_no_speculation_even_with_adversarial_previous_passes(engine, exact_run, greedy_run):
    _, records, stream = exact_run
    assert len(records) >= EXACT_S - 2 and stream.totals["hint_drafted"] > 0
    assert len(greedy_run[1]) == len(records)
    tb, vocab = engine.tokenizer.special.timestamp_begin, engine.lm.vocab_size
    foreign = engine.tokenizer.encode(" Der schnelle braune Fuchs springt über den faulen Hund, nicht wahr?")
    rng = random.Random(20)
    for record, plain in zip(records, greedy_run[1]):
        # the pass without speculation on the same buffer with the same options (its oracle)
        assert np.array_equal(plain.audio, record.audio) and plain.offset_s == record.offset_s
        assert plain.numerics == record.numerics
        assert {k: v for k, v in plain.options.items() if k not in ("speculation", "draft_hint")} == \
            {k: v for k, v in record.options.items() if k not in ("speculation", "draft_hint")}
        oracle = list(plain.tokens)
        assert record.tokens == oracle, f"pass {record.index} at {record.offset_s:.1f} s changed under drafting"
        prefix = list(record.options["prefix"] or ())
        assert oracle[:len(prefix)] == prefix  # committed text is forced, never decoded again
        hint = list(record.options["draft_hint"])
        if record.index % 3 or len(hint) < 4:
            continue
        shuffled = hint[:]
        rng.shuffle(shuffled)
        corrupted = [t + 1 if i % 2 else t for i, t in enumerate(hint)]  # every other token (timestamps too) off by one
        shifted = [tb + 3] + hint  # one token early: position-aligned drafting would miss everything
        random_ids = [rng.randrange(-3, vocab + 3) for _ in hint]
        for name, bad in (("shuffled", shuffled), ("corrupted", corrupted), ("shifted", shifted),
                          ("other language", foreign), ("random ids", random_ids), ("the answer", oracle[len(prefix):])):
            window, _ = decode_pass(engine, record.audio, **{**record.options, "draft_hint": tuple(bad)})
            assert list(window.tokens) == oracle, f"pass {record.index}: a {name} previous pass changed the tokens"


def test_previous_pass_drafts_are_accepted_and_cut_decoder_calls(engine, longform, exact_run, greedy_run):
    events, records, stream = exact_run
    audio = longform[:round(EXACT_S * SAMPLE_RATE)]
    no_hint = _run(engine, audio, numerics="batch-invariant", previous_pass_drafts=False)
    greedy = greedy_run
    # the same passes in the same numerics: the same tokens, so the same stream, whatever is drafted
    for other in (no_hint, greedy):
        assert [r.tokens for r in other[1]] == [r.tokens for r in records]
        assert _committed(other[0]) == _committed(events)
    t, t_no, t_greedy = stream.totals, no_hint[2].totals, greedy[2].totals
    acceptance = t["hint_accepted"] / t["hint_drafted"]
    print(f"\n[live] {t['passes']} passes, decoder calls: greedy {t_greedy['decoder_calls']}, drafts without the "
          f"previous pass {t_no['decoder_calls']}, with it {t['decoder_calls']}; previous-pass acceptance "
          f"{acceptance:.2f} ({t['hint_accepted']}/{t['hint_drafted']})")
    assert acceptance >= HINT_ACCEPT_FLOOR
    # Against the other drafters alone it depends on the decoder: fewer calls on the fork's kernels
    # (0.68 of greedy's), as many on the invariant decoder (215 against 211, both 0.54 of greedy's).
    assert t["decoder_calls"] <= CALLS_VS_GREEDY * t_greedy["decoder_calls"]


@pytest.mark.full  # force_committed=False is not the default (every pass's exactness: above)
def test_redecoding_committed_text_is_exact_too(engine, longform):
    """``force_committed=False`` (whisper_streaming's way: a pass decodes the committed text in its
    buffer again, drafted by the previous pass) keeps every pass exact and the text whole."""
    events, records, stream = _run(engine, longform[:round(EXACT_S * SAMPLE_RATE)], numerics="batch-invariant",
                                   force_committed=False)
    # measured: 0.32 on the invariant decoder (103/318), above 0.5 on the fork's kernels
    assert stream.totals["hint_accepted"] > 0.25 * stream.totals["hint_drafted"]
    for record in records[::3]:
        assert record.tokens == _oracle(engine, record), f"pass {record.index} changed under drafting"
    assert "ask what you can do for your country" in _committed(events).lower()


# -- the whole stream vs offline -----------------------------------------------------------------
DIGITS = {w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())}


def _words(text: str) -> list[str]:
    """Lowercase words without punctuation, digits as digits ("Two," and "2" alike): Whisper's
    normaliser joins spelled digit lists into one number, and the file holds 16-digit lists."""
    words = re.sub(r"[^\w\s']", " ", text.lower()).split()
    return [DIGITS.get(w, w) for w in words]


@pytest.fixture(scope="module")
def base_stream_engine(base_model_dir):
    from specwhisper import WhisperEngine

    # The encoder the engine picks (auto): on the Xeon the 53 s stream took 54 s of passes on
    # CTranslate2's encoder and 21 s on OpenVINO's (stream WER 4.9 / 6.2 %, offline 8.6 / 7.4 %).
    return WhisperEngine(base_model_dir, compute_type="int8", threads=2, encoder="auto", batch_decoder="invariant")


@pytest.mark.parametrize("stretch_s", [WER_S, pytest.param(WER_S_FULL, marks=pytest.mark.full)])
def test_committed_text_matches_offline_in_order_and_bounded(base_stream_engine, longform, shared_data, stretch_s):
    from benchmarks.metrics import edit_distance

    engine = base_stream_engine

    segments = [s for s in json.loads((shared_data / "longform/segments.json").read_text())["segments"]
                if s["end"] <= stretch_s]
    audio = longform[:round((segments[-1]["end"] + 0.25) * SAMPLE_RATE)]  # sentences, digit lists, sentences
    events, records, stream = _run(engine, audio)
    offline = _words(engine.transcribe(audio, language="en", numerics="batch-invariant").text)
    committed = _words(_committed(events))
    reference = _words(" ".join(s["text"] for s in segments))
    wer_stream, wer_offline = (edit_distance(reference, hyp) / len(reference) for hyp in (committed, offline))
    print(f"\n[live] WER vs reference: stream {wer_stream:.3f}, offline {wer_offline:.3f}; committed vs offline: "
          f"{edit_distance(offline, committed)}/{len(offline)} words differ; {stream.totals['passes']} passes, "
          f"{stream.totals['pass_s']:.1f} s for {stream.time_s:.0f} s of audio")
    assert wer_stream <= min(WER_BOUND, wer_offline + WER_MARGIN)
    assert all(r.audio.size <= 30 * SAMPLE_RATE for r in records)  # one window at most, ever
    commits = [e for e in events if e.kind == "commit"]
    for a, b in zip(commits, commits[1:]):
        assert a.start_s <= b.start_s and b.start_s <= b.end_s
        if a.segment_end:
            assert a.end_s <= b.start_s
    assert commits[-1].end_s <= stream.time_s + 1e-6
    # never retracted: every pass starts with the text committed in its buffer, and the commits
    # are the stream's only text (the tentative tail is empty at the end)
    for r in records:
        prefix = list(r.options["prefix"] or ())
        assert r.numerics == "skipped" or r.tokens[:len(prefix)] == prefix
    assert [e for e in events if e.kind == "tentative"][-1].text == ""


def test_an_unsure_pass_commits_nothing(engine, longform, shared_data, monkeypatch):
    """A pass whose mean token log-probability is below ``LOW_CONFIDENCE`` commits nothing and is
    not agreed with (a hallucination on hard audio repeats itself pass after pass): with every pass
    unsure, nothing of an 8 s stretch is committed before ``finish()``, which commits the last
    pass; with none unsure, text is committed as it comes."""
    import specwhisper.live as live

    audio = longform[:8 * SAMPLE_RATE]
    monkeypatch.setattr(live, "LOW_CONFIDENCE", 0.0)  # every pass: log-probabilities are negative
    stream = engine.stream("en", numerics="batch-invariant", draft_len=DRAFT_LEN)
    fed = [e for i in range(0, audio.size, SAMPLE_RATE) for e in stream.feed(audio[i:i + SAMPLE_RATE])]
    assert stream.totals["passes"] >= 7 and not [e for e in fed if e.kind == "commit" and e.text.strip()]
    assert {"fellow", "americans"} <= set(_words(_committed(stream.finish())))
    # the last pass decodes all it has: after an unsure pass a pass was capped at a step's worth of
    # tokens (26), and finish() committed the first sentence of 14 s of read speech
    read = load_audio(shared_data / "longform/ljspeech_LJ001-0001_to_0032_concat.flac")[:14 * SAMPLE_RATE]
    stream = engine.stream("en", numerics="batch-invariant", draft_len=DRAFT_LEN)
    fed = [e for i in range(0, read.size, SAMPLE_RATE) for e in stream.feed(read[i:i + SAMPLE_RATE])]
    assert not _committed(fed).strip()
    last, offline = (len(engine.tokenizer.encode(text)) for text in (
        _committed(stream.finish()), engine.transcribe(read, language="en", numerics="batch-invariant").text))
    assert last >= 0.9 * offline > 26, (last, offline)
    monkeypatch.setattr(live, "LOW_CONFIDENCE", float("-inf"))
    sure = engine.stream("en", numerics="batch-invariant", draft_len=DRAFT_LEN)
    fed = [e for i in range(0, audio.size, SAMPLE_RATE) for e in sure.feed(audio[i:i + SAMPLE_RATE])]
    assert "fellow" in _words(_committed(fed))


def test_a_streams_language_is_not_fixed_by_its_first_seconds_guess(base_stream_engine, shared_data):
    """``language=None``: the language was fixed by the first pass that heard words, a 1 s guess (a
    Japanese stream decoded as English nonsense after " Thank you."); now by the first sure pass
    over ``LANGUAGE_MIN_S`` of audio."""
    audio = load_audio(shared_data / "read/audio/multilingual_common_voice_ja_24511055.flac")
    assert base_stream_engine.transcribe(audio).language == "ja"
    stream = base_stream_engine.stream(None)
    list(stream.events(audio[i:i + SAMPLE_RATE] for i in range(0, audio.size, SAMPLE_RATE)))
    assert stream.language == "ja"
    # Japanese has no spaces: every kana or Chinese character may end a word (a Japanese stream
    # committed nothing until a segment ended); a piece of a character may not
    stream = base_stream_engine.stream("ja", step_s=0.5, endpointing="off")
    fed = [e for i in range(0, audio.size, SAMPLE_RATE // 2) for e in stream.feed(audio[i:i + SAMPLE_RATE // 2])]
    assert [e for e in fed if e.kind == "commit" and e.text and not e.segment_end]
    tokenizer = base_stream_engine.tokenizer
    assert all(stream._starts_word(tokenizer.encode(text)[0]) for text in ("外れ", "キャンプ", "電"))
    assert not stream._starts_word(tokenizer.encode("昼")[0])  # its first byte only
    # Thai is written without spaces too (word timestamps split it on characters): a stream may
    # commit at any Thai character but a vowel mark; Latin words (in Chinese text, an English
    # translation) still end at spaces, whatever the stream's language
    thai = tokenizer.encode("สวัสดีครับ")
    starts = [tokenizer.decode([t])[:1] not in ("\ufffd", "\u0e31", "\u0e35") for t in thai]  # not its vowel marks
    assert starts.count(True) >= 5
    assert [stream._starts_word(t) for t in thai] == starts
    latin = tokenizer.encode(" Quilter antidisestablishmentarianism")
    assert stream._starts_word(latin[0]) and not any(stream._starts_word(t) for t in latin[1:]
                                                     if not tokenizer.decode([t]).startswith(" "))


def test_a_full_buffer_with_no_segment_end_keeps_the_audio_after_the_last_word(engine, longform, monkeypatch):
    """A buffer that reaches ``max_buffer_s`` with nothing agreed and no segment end in the pass (a
    pass cut short by its cap or a loop) commits the pass but its last word (which may be cut off)
    and cuts the buffer where the committed words end, keeping what the pass had not decoded yet
    (before: the whole buffer went, and with it digits of longform.flac no pass ever heard). The
    pass and the word end are fixed here; the stream's own WER tests cover real passes."""
    tb = engine.tokenizer.special.timestamp_begin
    words = engine.tokenizer.encode(" two, eight, five")
    stream = engine.stream("en", max_buffer_s=3.0, endpointing="off")  # the buffer as fed

    def unsure_pass_without_segment_end(buffer):
        stream._unsure = True
        return [tb] + words

    monkeypatch.setattr(stream, "_decode", unsure_pass_without_segment_end)
    monkeypatch.setattr(stream, "_word_end", lambda buffer, committed, heard: round(1.25 * SAMPLE_RATE))
    events = [e for i in range(0, 3 * SAMPLE_RATE, SAMPLE_RATE) for e in stream.feed(longform[i:i + SAMPLE_RATE])]
    assert _committed(events).strip() == "two, eight,"
    assert stream.buffer_s == pytest.approx(3.0 - 1.25)  # the rest stays for the next passes
    commits = [e for e in events if e.kind == "commit"]
    assert [e.end_s for e in commits if e.segment_end] == [pytest.approx(1.25)]
    assert all(e.end_s <= 1.25 + 1e-6 for e in commits)  # no commit ends after the cut


def test_a_word_cut_aligns_the_committed_words_with_all_the_pass_heard(engine, longform):
    """A full buffer with one committed word ("9,") and 14 s of digits after it is cut where the
    word ends. Aligned alone (forced, nothing after it), the word ended at 14.3 s and the cut
    dropped the digits no pass had committed; aligned with what the pass heard after it, it ends
    where the digit does (102.18-102.72 s in the file)."""
    buffer = longform[round(101.63 * SAMPLE_RATE):round(116.0 * SAMPLE_RATE)]
    stream = engine.stream("en", numerics="batch-invariant", endpointing="off")
    committed = [engine.tokenizer.special.timestamp_begin] + engine.tokenizer.encode(" 9,")
    window, _ = decode_pass(engine, buffer, language="en", timestamps="on", prefix=tuple(committed),
                            numerics="batch-invariant")
    heard = list(window.tokens)
    assert len([t for t in heard if t < engine.tokenizer.special.eot]) > 10  # the digits after it
    assert 0.5 <= stream._word_end(buffer, committed, heard) / SAMPLE_RATE <= 2.0


def test_a_segment_is_trimmed_at_the_later_of_two_agreeing_ends(engine):
    """Two passes agree on a segment end whatever their timestamps say (7.00 s and 7.76 s); the
    buffer is trimmed at the later one (the earlier fell inside "his gospel" on longform.flac, and
    the next passes heard it again), but never after the start of the pass's next segment."""
    tb = engine.tokenizer.special.timestamp_begin
    words = engine.tokenizer.encode(" welcome his gospel.")
    stream = engine.stream("en")
    stream._previous = [tb] + words + [tb + 388]
    assert stream._trim_point([tb] + words + [tb + 350], len(words) + 1) == tb + 388
    assert stream._trim_point([tb] + words + [tb + 350, tb + 360, words[0]], len(words) + 1) == tb + 360
    stream._previous = [tb] + words[:-1] + [tb + 300, tb + 388]  # a pass that ended elsewhere: not the same end
    assert stream._trim_point([tb] + words + [tb + 350], len(words) + 1) == tb + 350
    stream._previous = None
    assert stream._trim_point([tb] + words + [tb + 350], len(words) + 1) == tb + 350
