"""Command mode (issue 20): endpointed utterances, each decoded once, one result per command.

A stream of domain commands (real shared clips joined by silences) must give one result per
command, in order, at the commands' times, each the text ``transcribe`` gives for that
utterance's audio without speculation in the same numerics; the same results however the audio
is chunked; energy endpointing where VAD is absent; the token map's language; learning; bounded
memory; and clear errors. Model: base int8 (2 threads), the model command mode is measured with.
"""

from __future__ import annotations

import json
import random
import re
import time
import tracemalloc

import numpy as np
import pytest
import soundfile

from clips import clips
from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.cli import main
from specwhisper.errors import AudioError, OptionError, SpecWhisperError
from specwhisper.listen import check_listener_options
from specwhisper.listen_endpoint import FRAME, Endpointer
from specwhisper.tokenmap import build_token_map, load_token_map

# (set, clip index, silence after it in seconds): voices en-us, +f3, +m3; one short command;
# the clips carry 0.25 s of silence before the speech and about 0.6 s after it
COMMANDS = (("smarthome", 1, 0.3), ("car", 0, 0.0), ("smarthome", 2, 0.5), ("car", 2, 0.2), ("car", 1, 0.8))
LEAD_S = 0.7  # silence before the first command
SPEECH_LEVEL = 0.01  # |sample| above this is speech when finding the true boundaries (-40 dBFS)
START_TOLERANCE_S, END_TOLERANCE_S = 0.2, 0.25  # frames are 32 ms; VAD lags onsets and decays


@pytest.fixture(scope="module")
def stream(shared_data):
    """The commands joined: (audio, [(speech start s, speech end s, reference text)])."""
    parts, truth, pos = [np.zeros(round(LEAD_S * SAMPLE_RATE), np.float32)], [], round(LEAD_S * SAMPLE_RATE)
    for name, index, gap in COMMANDS:
        clip = clips(shared_data, name)[index]
        audio = load_audio(clip["path"])
        loud = np.flatnonzero(np.abs(audio) > SPEECH_LEVEL)
        truth.append(((pos + loud[0]) / SAMPLE_RATE, (pos + loud[-1] + 1) / SAMPLE_RATE, clip["text"]))
        parts += [audio, np.zeros(round(gap * SAMPLE_RATE), np.float32)]
        pos += audio.size + round(gap * SAMPLE_RATE)
    return np.concatenate(parts), truth


@pytest.fixture(scope="module")
def domain_map(base_engine, shared_data, tmp_path_factory):
    """A token map of both domains' training transcripts (language en, the builder's default)."""
    lines = []
    for name in ("smarthome", "car"):
        lines += (shared_data / f"domain/{name}/train.txt").read_text(encoding="utf-8").splitlines()
    return build_token_map(lines, base_engine.tokenizer).save(tmp_path_factory.mktemp("listen") / "domain.tmap")


@pytest.fixture(scope="module")
def map_engine(base_engine, domain_map):
    """The oracle engine's model with the domain map drafting: speculation runs on every command."""
    return WhisperEngine(loaded=base_engine.lm, tokenmap=domain_map, prompt_lookup=False)


def _chunks(audio: np.ndarray, seconds: float):
    step = round(seconds * SAMPLE_RATE)
    return (audio[i:i + step] for i in range(0, audio.size, step))


def _listen(engine, audio: np.ndarray, chunks=None, **options):
    listener = engine.listen(**options)
    results = list(listener.events(chunks if chunks is not None else _chunks(audio, 0.1)))
    return results, listener


def _key(result) -> tuple:
    return (result.text, result.start_s, result.end_s, result.audio_start_s, result.audio_end_s, result.reason,
            tuple(result.result.tokens))


def _span(audio: np.ndarray, result) -> np.ndarray:
    return audio[round(result.audio_start_s * SAMPLE_RATE):round(result.audio_end_s * SAMPLE_RATE)]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def _check_commands(results, audio, truth, oracle, language="en"):
    """One result per command, in order, at its time, with the oracle's decoding of its span."""
    assert len(results) == len(truth), [r.text for r in results]
    for result, (start, end, reference) in zip(results, truth):
        assert abs(result.start_s - start) < START_TOLERANCE_S, (result, start)
        assert abs(result.end_s - end) < END_TOLERANCE_S, (result, end)
        assert result.audio_start_s <= result.start_s < result.end_s <= result.audio_end_s
        assert result.reason == "silence" and result.language == language
        # the same decoding: transcribe on the span, speculation off, in the numerics it ran in
        expected = oracle.transcribe(_span(audio, result), language=language, audio_ctx="auto",
                                     numerics=result.stats["numerics"], speculation=False)
        assert result.result.tokens == expected.tokens and result.text == expected.text, reference
        assert result.latency_s >= result.decode_s > 0 and result.stats["tokens"] > 0


# -- one result per command ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def map_run(map_engine, stream):
    audio, _ = stream
    return _listen(map_engine, audio)


def test_one_result_per_command_with_the_decoding_of_its_audio(map_run, base_engine, stream):
    audio, truth = stream
    results, listener = map_run
    assert listener.endpointing in ("vad", "energy")  # vad where the [vad] extra is installed (the test extra)
    _check_commands(results, audio, truth, base_engine)
    # the language came from the token map (no detection on 2 s accented commands), and drafts ran
    assert {r.language_source for r in results} == {"token map"}
    assert sum(r.stats["accepted"] for r in results) > 0
    assert listener.totals["utterances"] == len(truth) and listener.buffered_s < 1.0
    # words right on most commands (espeak voices; a loose check that the text is the commands')
    words = sum(len(_words(r.text) & _words(t[2])) for r, t in zip(results, truth))
    assert words >= 0.6 * sum(len(_words(t[2])) for t in truth)
    line = json.loads(json.dumps(results[0].to_dict()))
    assert line["type"] == "command" and line["text"] == results[0].text and "decoder_calls" in line


def test_same_results_whatever_the_chunking(base_engine, stream):
    audio, truth = stream
    reference, _ = _listen(base_engine, audio, language="en")
    assert len(reference) == len(truth)
    pcm = (np.clip(audio, -1, 1 - 2 ** -15) * 32768).astype("<i2")
    as_int16 = pcm.astype(np.float32) / 32768  # what the int16 feeds below carry
    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, audio.size), 40))
    for chunks, expected in (
            ([audio], reference),  # all at once
            ((audio[a:b] for a, b in zip([0, *cuts], [*cuts, audio.size])), reference),  # random sizes
            ((pcm.tobytes()[i:i + 1001] for i in range(0, pcm.nbytes, 1001)), None),  # odd-sized PCM bytes
    ):
        results, _ = _listen(base_engine, audio, chunks, language="en")
        if expected is None:  # the bytes are int16: the same results as int16 samples fed whole
            expected, _ = _listen(base_engine, as_int16, [pcm], language="en")
        assert [_key(r) for r in results] == [_key(r) for r in expected]


def test_energy_endpointing_without_vad(base_engine, stream, monkeypatch, tmp_path):
    audio, truth = stream
    results, listener = _listen(base_engine, audio, language="en", endpointing="energy")
    assert listener.endpointing == "energy"
    _check_commands(results, audio, truth, base_engine)

    import specwhisper.vad

    def missing():
        raise SpecWhisperError("vad_filter needs the Silero VAD model, which is not installed")

    monkeypatch.setattr(specwhisper.vad, "get_vad_model", missing)
    assert base_engine.listen().endpointing == "energy"  # auto: energy where VAD is absent
    with pytest.raises(SpecWhisperError, match="VAD endpointing is unavailable") as info:
        base_engine.listen(endpointing="vad")
    assert "--energy" in info.value.hint
    assert base_engine.stream("en").endpointing == "energy"  # a live stream's speech gate alike
    with pytest.raises(SpecWhisperError, match="VAD endpointing is unavailable") as info:
        base_engine.stream("en", endpointing="vad")
    assert "stream --endpointing energy" in info.value.hint


# -- token map: language and learning --------------------------------------------------------------
def test_learning_drafts_a_repeated_command_whole(base_engine, domain_map, stream, tmp_path):
    audio, truth = stream
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=domain_map, learn=True, prompt_lookup=False)
    # pinned numerics: with auto, the first hearing of a command may run single-row (nothing to draft)
    first, _ = _listen(engine, audio, numerics="batch-invariant")
    learned = engine.tokenmap_drafter.dynamic.sequences.n_sequences
    assert learned == len(truth)
    again, _ = _listen(engine, audio, numerics="batch-invariant")
    assert [r.text for r in again] == [r.text for r in first]  # speculation never changes the text
    assert engine.tokenmap_drafter.dynamic.sequences.n_sequences == 2 * learned
    calls = sum(r.stats["decoder_calls"] for r in first), sum(r.stats["decoder_calls"] for r in again)
    assert calls[1] < calls[0], calls  # each command is recalled whole the second time
    saved = load_token_map(engine.save_learned(tmp_path / "learned.tmap"), engine.tokenizer)
    assert saved.header.language == "en"  # merged into the domain map, whose language it keeps
    assert saved.header.n_sequences == load_token_map(domain_map).header.n_sequences + 2 * learned


def test_token_map_sets_the_language_of_transcribe(map_engine, base_engine, shared_data, tmp_path):
    path = clips(shared_data, "smarthome")[1]["path"]
    mapped = map_engine.transcribe(path)
    assert (mapped.language, mapped.language_source, mapped.timings["language_s"]) == ("en", "token map", 0.0)
    assert mapped.to_dict()["language_source"] == "token map"
    assert map_engine.transcribe(path, language="en").language_source == "given"
    assert map_engine.transcribe(path, task="translate").language_source == "detected"  # the map says nothing
    assert base_engine.transcribe(path).language_source == "detected"
    lines = (shared_data / "domain/smarthome/train.txt").read_text(encoding="utf-8").splitlines()
    silent = build_token_map(lines, base_engine.tokenizer, language=None).save(tmp_path / "none.tmap")
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=silent, prompt_lookup=False)
    assert engine.tokenmap_language is None and engine.transcribe(path).language_source == "detected"


# -- memory and clock ----------------------------------------------------------------------------
def test_an_hour_of_silence_keeps_only_the_pre_roll(base_engine, stream):
    audio, truth = stream
    listener = base_engine.listen(language="en")
    ten_s = np.zeros(10 * SAMPLE_RATE, np.float32)
    rng = np.random.default_rng(0)
    hiss = (rng.standard_normal(10 * SAMPLE_RATE) * 1e-3).astype(np.float32)  # -60 dBFS: the detector runs
    tracemalloc.start()
    t0 = time.perf_counter()
    for i in range(360):  # one hour, a minute of it hiss
        assert listener.feed(hiss if i % 60 == 0 else ten_s) == []
        assert listener.buffered_s <= 0.36 and not listener.in_speech  # the 0.3 s pad, in whole frames
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 30 and peak < 8 * 2 ** 20 and listener.totals["utterances"] == 0
    results = listener.feed(audio) + listener.finish()
    assert len(results) == len(truth) and abs(results[0].start_s - 3600 - truth[0][0]) < START_TOLERANCE_S


def test_endpointer_cuts_endless_speech_and_drops_clicks():
    endpointer = Endpointer(silence=10, max_length=50, min_speech=3, pad=5)
    frame = np.ones(FRAME, np.float32)
    cut = [u for u in (endpointer.push(frame, True) for _ in range(1000)) if u is not None]
    assert len(cut) == 20 and {u.reason for u in cut} == {"max_length"}
    assert all(u.audio.size <= 55 * FRAME for u in cut) and endpointer.buffered <= 55 * FRAME
    assert cut[1].speech_start == cut[0].decided  # cut back to back, nothing lost or repeated
    clicks = Endpointer(silence=10, max_length=50, min_speech=3, pad=5)
    for i in range(200):
        assert clicks.push(frame, i % 40 == 0) is None  # one speech frame at a time: never an utterance
    assert clicks.dropped == 5 and clicks.buffered <= 15 * FRAME


# -- bad input -----------------------------------------------------------------------------------
def test_bad_chunks_options_and_feeding_after_finish(base_engine):
    listener = base_engine.listen(language="en")
    listener.feed(np.zeros(1000, np.float32))
    for bad, match in ((np.zeros(100, np.int32), "dtype"), (np.zeros((100, 2), np.float32), "mono"),
                       (np.full(100, np.nan, np.float32), "NaN"), ([0.0] * 100, "type list")):
        with pytest.raises(AudioError, match=match):
            listener.feed(bad)
    assert listener.time_s == 1000 / SAMPLE_RATE  # refused chunks left nothing behind
    assert listener.finish() == [] and listener.finish() == []
    with pytest.raises(SpecWhisperError, match="after finish"):
        listener.feed(np.zeros(100, np.float32))
    for kwargs, where in (({"silence_s": 0.0}, "silence_s"), ({"max_utterance_s": 40}, "max_utterance_s"),
                          ({"pad_s": -1}, "pad_s"), ({"silence_s": "0.6"}, "silence_s"),
                          ({"endpointing": "loud"}, "endpointing"), ({"clip_timestamps": "0,5"}, "clip_timestamps"),
                          ({"numerics": "fast"}, "numerics (--numerics)")):
        with pytest.raises(SpecWhisperError) as info:
            base_engine.listen(**kwargs)
        assert info.value.where == where
    with pytest.raises(OptionError):  # a ValueError, as the README promises for a bad option value
        base_engine.listen(endpointing="loud")
    with pytest.raises(OptionError):
        base_engine.listen(vad_threshold=2)
    with pytest.raises(AudioError, match="16 kHz"):
        base_engine.listen(sample_rate=8000)
    with pytest.raises(OptionError, match="language"):
        base_engine.listen(language="xx")


def test_cli_listen_json_and_txt(map_engine, domain_map, stream, tmp_path, capsys):
    audio, truth = stream
    wav = tmp_path / "commands.wav"
    soundfile.write(wav, audio[:round((truth[2][1] + 0.9) * SAMPLE_RATE)], SAMPLE_RATE, subtype="FLOAT")
    common = [str(wav), "--model", str(map_engine.model_dir), "--threads", "2", "--tokenmap", str(domain_map)]
    assert main(["listen", *common, "--output-format", "json", "--energy", "--stats"]) == 0
    out = capsys.readouterr()
    lines = [json.loads(line) for line in out.out.splitlines()]
    assert len(lines) == 3 and all(line["language_source"] == "token map" for line in lines)
    assert [line["start_s"] for line in lines] == sorted(line["start_s"] for line in lines)
    assert "endpointing energy" in out.err and "3 commands" in out.err
    assert main(["listen", *common, "--energy", "--silence-ms", "700"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text == [line["text"].strip() for line in lines]
    assert main(["listen", str(wav), "--silence-ms", "20"]) == 2
    assert "--silence-ms" in capsys.readouterr().err
    assert main(["listen", str(wav), "--complete-ms", "100"]) == 2
    assert "--complete-ms needs a token map" in capsys.readouterr().err
    assert main(["listen", *common, "--complete-ms", "900"]) == 2
    err = capsys.readouterr().err
    assert "complete_s must be" in err and "--complete-ms: 30 to 600" in err  # the flag the user typed
    assert main(["listen", *common, "--energy", "--complete-ms", "100", "--output-format", "json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    # listen decodes on a short encoder window by default (lossy, faster); --audio-ctx full as
    # transcribe. A fixed draft length, as transcribe and stream take it (a helper found listen had
    # no such flag): both runs in full context.
    assert {line["audio_ctx"] for line in lines} != {3000}
    assert main(["listen", str(wav), "--audio-ctx", "wide"]) == 2 and "audio_ctx" in capsys.readouterr().err
    runs = {}
    for run in (["--draft-len", "3"], ["--draft-len", "0"]):
        assert main(["listen", *common, "--energy", "--numerics", "batch-invariant", "--output-format", "json",
                     "--audio-ctx", "full", *run]) == 0
        runs[" ".join(run)] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert {line["audio_ctx"] for line in runs[" ".join(run)]} == {3000}
    texts = {name: [line["text"] for line in lines] for name, lines in runs.items()}
    assert texts["--draft-len 3"] == texts["--draft-len 0"] and len(texts["--draft-len 0"]) == 3  # lossless
    assert sum(line["drafted"] for line in runs["--draft-len 3"]) > 0  # the flag reached the decoding
    assert sum(line["drafted"] for line in runs["--draft-len 0"]) == 0
    assert main(["listen", str(wav), "--draft-len", "17"]) == 2 and "draft_len (--draft-len)" in capsys.readouterr().err
    assert main(["listen", str(tmp_path / "missing.wav")]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_failed_decoding_costs_one_command_not_the_audio_after_it(base_engine, stream, monkeypatch):
    """A block holding several commands is endpointed whole before any is decoded: when one
    decoding raises, the commands after it stay queued and come with the next feed or finish."""
    audio, truth = stream
    reference, _ = _listen(base_engine, audio, language="en")
    listener = base_engine.listen(language="en")
    real, calls = base_engine.transcribe, []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("decoder failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(base_engine, "transcribe", failing_once)
    with pytest.raises(RuntimeError, match="decoder failed"):
        listener.feed(audio)  # every command of the stream in one block
    results = listener.finish()
    assert [_key(r) for r in results] == [_key(r) for r in reference[1:]]


def test_an_interrupt_costs_no_command(base_engine, stream, monkeypatch):
    """A notebook's stop button (KeyboardInterrupt) while a block of commands is decoded: the
    commands decoded before it and the one it stopped come with the next call (a helper lost
    2-5 of 10 that way), and an interrupted ``finish`` is completed by calling it again."""
    audio, truth = stream
    reference, _ = _listen(base_engine, audio, language="en")
    real, calls = base_engine.transcribe, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) in stops:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(base_engine, "transcribe", interrupted)
    stops = (3,)
    listener = base_engine.listen(language="en")
    with pytest.raises(KeyboardInterrupt):
        listener.feed(audio)  # every command of the stream in one block
    assert [_key(r) for r in listener.finish()] == [_key(r) for r in reference]

    stops = ()
    listener = base_engine.listen(language="en")
    results = listener.feed(audio[:round(truth[-1][1] * SAMPLE_RATE)])  # the last command still under way
    calls.clear()
    stops = (1,)  # its decoding, by finish
    with pytest.raises(KeyboardInterrupt):
        listener.finish()
    results += listener.finish()  # the last one ended by finish, not by its silence: same text
    assert [r.text for r in results] == [r.text for r in reference] and listener.finish() == []


def test_an_utterance_is_decoded_while_its_silence_comes_in(base_engine, stream):
    """Fed in real-time-sized chunks, each command is decoded as soon as its pad is in, and that
    decoding is its result (the same audio: the same result as decoding it at the end); a command
    that goes on after a pause shorter than the silence drops its early decoding."""
    audio, truth = stream
    at_end, late = _listen(base_engine, audio, [audio], language="en")  # one feed: nothing can be early
    results, listener = _listen(base_engine, audio, _chunks(audio, 0.05), language="en")
    assert [_key(r) for r in results] == [_key(r) for r in at_end]
    assert listener.totals["early_used"] == len(truth) and late.totals["early_used"] == 0
    for early in results:
        # the silence is the floor; decoded early (once 0.3 s of pad, 10 frames: 0.32 s, and the rest of
        # its 0.05 s chunk were in), the decoding hides in it: decoding at its end would add the two
        # (latency >= 0.6 + decode_s, over this bound). Each result against its own decoding time.
        assert listener.silence_s - 0.05 <= early.latency_s <= max(listener.silence_s + 0.04,
                                                                    0.32 + 0.05 + early.decode_s)
    # a pause of 0.4 s (longer than the 0.3 s pad, shorter than the 0.6 s silence) inside one command
    (a0, a1, first), (b0, b1, second) = truth[0], truth[1]
    pause = np.zeros(round(0.4 * SAMPLE_RATE), np.float32)
    spoken = [audio[round(a0 * SAMPLE_RATE) - 4000:round(a1 * SAMPLE_RATE)], pause,
              audio[round(b0 * SAMPLE_RATE):round(b1 * SAMPLE_RATE) + 4000], np.zeros(SAMPLE_RATE, np.float32)]
    joined = np.concatenate(spoken)
    results, listener = _listen(base_engine, joined, _chunks(joined, 0.05), language="en")
    assert len(results) == 1 and listener.totals["early_wasted"] >= 1 and listener.totals["early_used"] == 1
    assert _words(first) & _words(results[0].text) and _words(second) & _words(results[0].text)


# -- ending on a whole command (complete_s) --------------------------------------------------------
def test_end_probability_counts_how_often_commands_ended_after_the_last_words(base_engine, tmp_path):
    """The map's counts of end-of-text after a context: trailing punctuation is not asked about,
    a context needs two tokens and three sightings, and an unseen one says nothing."""
    lines = ["Turn on the kitchen lights."] * 6 + ["Turn on the kitchen lights to 50%."] * 2 + \
            ["Set the thermostat to 21 degrees."] * 4
    tmap = build_token_map(lines, base_engine.tokenizer, min_count=1).save(tmp_path / "few.tmap")
    drafter = WhisperEngine(loaded=base_engine.lm, tokenmap=tmap, prompt_lookup=False).tokenmap_drafter
    tokens = base_engine.tokenizer.encode
    assert drafter.end_probability(tokens(" Turn on the kitchen lights.")) == pytest.approx(6 / 8)
    assert drafter.end_probability(tokens(" Turn on the kitchen lights")) == pytest.approx(6 / 8)
    assert drafter.end_probability(tokens(" Set the thermostat to 21 degrees.")) == 1.0
    assert drafter.end_probability(tokens(" Set the thermostat to.")) == 0.0
    assert drafter.end_probability(tokens(" Open the garage door.")) is None  # never seen
    assert drafter.end_probability(tokens(" lights.")) is None  # one word: too little to judge


@pytest.mark.full  # complete_s is off by default
def test_a_whole_command_ends_after_a_short_silence(map_engine, base_engine, stream):
    """With ``complete_s`` a command whose text the map calls whole ends after 0.1 s of silence
    (sooner than the 0.6 s silence), decoded exactly as ``transcribe`` decodes its span; the cuts
    are the same however the stream is chunked; one cut off where commands go on waits."""
    audio, truth = stream
    # two of these five end at 0.5 (0.81, 0.88 here). Numerics pinned: under ``auto`` a window's choice
    # follows what the policy learned from the engine's earlier calls (the first listen here), so the
    # second could decode in other numerics and part at a near-tie ("slow-cooker" on the Xeon)
    complete = dict(complete_s=0.1, complete_p=0.5, numerics="batch-invariant")
    results, listener = _listen(map_engine, audio, _chunks(audio, 0.05), **complete)
    whole, _ = _listen(map_engine, audio, [audio], **complete)
    assert [_key(r) for r in results] == [_key(r) for r in whole]
    assert len(results) == len(truth), [r.text for r in results]
    ended = [r for r in results if r.reason == "complete"]
    assert ended and listener.totals["complete_ended"] == len(ended)
    for result in ended:
        # waited 4 frames and the rest of the 0.05 s chunk, not the 0.6 s silence; then its decoding
        assert result.decode_s < result.latency_s <= result.decode_s + 0.128 + 0.05
        assert result.audio_end_s - result.end_s == pytest.approx(0.128, abs=0.001)  # 4 frames of 32 ms
        expected = base_engine.transcribe(_span(audio, result), language="en", audio_ctx="auto",
                                          numerics=result.stats["numerics"], speculation=False)
        assert result.result.tokens == expected.tokens
    # the first command cut after "to" by a 0.4 s pause: "... light to" is no whole command, so it waits
    start, end, reference = truth[0]
    span = audio[round(start * SAMPLE_RATE) - 4000:round(end * SAMPLE_RATE) + 4000]
    words = [w for s in base_engine.transcribe(span, language="en", word_timestamps=True).segments for w in s.words]
    cut = next(round(w.end * SAMPLE_RATE) for w in words if w.word.strip().lower() == "to")
    spoken = np.concatenate([span[:cut], np.zeros(round(0.4 * SAMPLE_RATE), np.float32), span[cut:],
                             np.zeros(SAMPLE_RATE, np.float32)])
    results, listener = _listen(map_engine, spoken, _chunks(spoken, 0.05), **complete)
    assert len(results) == 1 and listener.totals["complete_tried"] >= 2, [r.text for r in results]
    assert {"to", "brightness"} <= _words(results[0].text), results[0].text


def test_complete_s_is_checked(base_engine):
    with pytest.raises(OptionError, match="complete_s needs a token map"):
        base_engine.listen(complete_s=0.1)
    with pytest.raises(OptionError, match="complete_s"):
        check_listener_options(silence_s=0.6, complete_s=0.8)
    with pytest.raises(OptionError, match="complete_p"):
        check_listener_options(complete_s=0.1, complete_p=1.5)


def test_a_listener_fed_from_two_threads_at_once_is_a_clear_error(base_engine):
    """A voice server fed one listener from two pool threads: IndexError from a deque, or another
    command's text. A second caller while one is inside feed() or finish() is refused, by name."""
    import threading

    from specwhisper.errors import SpecWhisperError

    listener = base_engine.listen()
    listener.feed(np.zeros(1600, np.float32))
    inside = listener.__dict__["_calling"]  # what a thread inside feed() holds
    inside.acquire()
    try:
        for call in (lambda: listener.feed(np.zeros(1600, np.float32)), listener.finish):
            with pytest.raises(SpecWhisperError, match="another thread is in feed"):
                call()
    finally:
        inside.release()
    other = threading.Thread(target=listener.feed, args=(np.zeros(1600, np.float32),))
    other.start()
    other.join()
    assert listener.finish() == [] and listener.finished
