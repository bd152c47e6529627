"""faster-whisper's API (``specwhisper.WhisperModel``), used as faster-whisper's own README and tests
use it, on real models (base, tiny.en) and the shared corpus: construct, transcribe jfk with word
timestamps, VAD with parameters, the batched pipeline, empty audio, stereo input, prefix,
clip_timestamps, multilingual, hotwords, the two transcribe signatures, and bad input."""

from __future__ import annotations

import inspect
import io

import numpy as np
import pytest

from conftest import load_manifest
from specwhisper import BatchedInferencePipeline, WhisperModel, decode_audio, format_timestamp
from specwhisper.errors import OptionError, SpecWhisperError

JFK = (" And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
       "country.")


@pytest.fixture(scope="module")
def model(base_model_dir) -> WhisperModel:
    return WhisperModel(str(base_model_dir), device="cpu", compute_type="int8", cpu_threads=2)


@pytest.fixture(scope="module")
def jfk_path(shared_data) -> str:
    return str(shared_data / "real" / "audio" / "jfk.flac")


def _words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalnum() or c.isspace()).split()


def test_transcribe_with_word_timestamps_as_faster_whisper_readme(model, jfk_path):
    segments, info = model.transcribe(jfk_path, beam_size=5, word_timestamps=True)
    assert info.language == "en" and info.language_probability > 0.9 and info.duration == 11
    assert info.all_language_probs[0][0] == "en"
    assert abs(info.all_language_probs[0][1] - info.language_probability) < 1e-12
    assert inspect.isgenerator(segments)
    segments = list(segments)
    assert _words("".join(s.text for s in segments)) == _words(JFK)
    for seg in segments:
        assert seg.text == "".join(w.word for w in seg.words)
        assert seg.start == seg.words[0].start and seg.end == seg.words[-1].end
        assert all(w.start <= w.end and 0 <= w.probability <= 1 for w in seg.words)
        assert seg.avg_logprob < 0 and 0 <= seg.no_speech_prob < 0.5 and seg.compression_ratio > 0
        assert seg.temperature == 0.0 and seg.tokens
    assert [s.id for s in segments] == list(range(1, len(segments) + 1))
    assert info.specwhisper["numerics"] == "beam-search"  # beam 5 runs CTranslate2's beam search


def test_greedy_speculates_and_equals_greedy_without_drafts(model, jfk_path):
    drafted, info = model.transcribe(jfk_path, beam_size=1, language="en")
    drafted = list(drafted)
    plain, _ = model.transcribe(jfk_path, beam_size=1, language="en", speculation=False,
                                numerics=info.specwhisper["numerics"])
    plain = list(plain)
    assert [s.tokens for s in drafted] == [s.tokens for s in plain]
    assert [s.avg_logprob for s in drafted] == [s.avg_logprob for s in plain]
    assert [s.no_speech_prob for s in drafted] == [s.no_speech_prob for s in plain]


def test_fallback_samples_with_beam_one_under_speculation(model, jfk_path):
    """As faster-whisper, beam search is for the greedy attempt only: with beam_size=5 a sampled
    attempt runs our seeded sampler (best_of candidates, each its own draw) and stays exact."""
    kw = dict(beam_size=5, best_of=2, temperature=0.7, language="en", seed=5)
    drafted, info = model.transcribe(jfk_path, **kw)
    drafted = list(drafted)
    assert info.specwhisper["numerics"] != "beam-search"
    plain, _ = model.transcribe(jfk_path, speculation=False, numerics=info.specwhisper["numerics"], **kw)
    assert [s.tokens for s in drafted] == [s.tokens for s in list(plain)]
    assert all(s.temperature == 0.7 for s in drafted)


def test_scores_match_ctranslate2_generate(base_model_dir, jfk_path):
    """avg_logprob and no_speech_prob of a single-row window are what faster-whisper reads from
    CTranslate2's generate for the same tokens, to the last bit: such a window is decoded by
    generate itself where scores are wanted (a scoring pass afterwards, multi-row calls, moved
    them by 0.004 and cost a second prefill, ~60 ms a short window)."""
    from specwhisper.features import content_frames, log_mel_spectrogram, window_features

    model = WhisperModel(str(base_model_dir), cpu_threads=2, encoder="ct2", batch_decoder="ct2")
    ours = list(model.transcribe(jfk_path, beam_size=1, language="en", without_timestamps=True,
                                 numerics="single-row", speculation=False)[0])[0]
    lm, tokenizer = model.engine.lm, model.engine.tokenizer
    mel = log_mel_spectrogram(decode_audio(jfk_path), n_mels=lm.n_mels)
    encoder_output = lm.encode(window_features(mel[:, :content_frames(mel)], 0))  # as the engine cuts it
    generated = lm.decoder.generate(encoder_output, [tokenizer.sot_sequence("en", "transcribe")], beam_size=1,
                                  return_scores=True, return_no_speech_prob=True)[0]
    n = len(generated.sequences_ids[0])
    assert ours.tokens == list(generated.sequences_ids[0])
    assert ours.avg_logprob == generated.scores[0] * n / (n + 1)  # faster-whisper's reading of the score
    assert ours.no_speech_prob == generated.no_speech_prob


def test_vad_with_parameters(model, jfk_path):
    segments, info = model.transcribe(jfk_path, vad_filter=True,
                                      vad_parameters=dict(min_silence_duration_ms=500, speech_pad_ms=200))
    segments = list(segments)
    assert _words("".join(s.text for s in segments)) == _words(JFK)
    assert 0 <= segments[0].start < 1 and 10 < segments[-1].end <= 11
    assert info.vad_options.min_silence_duration_ms == 500 and info.vad_options.speech_pad_ms == 200
    assert info.duration_after_vad <= info.duration


def test_vad_times_map_back_to_the_original_audio(model, jfk_path):
    audio = decode_audio(jfk_path)
    padded = np.concatenate([np.zeros(16000 * 5, np.float32), audio])
    segments, info = model.transcribe(padded, beam_size=1, vad_filter=True, word_timestamps=True)
    segments = list(segments)
    assert info.duration == pytest.approx(16.0) and info.duration_after_vad < 13
    assert 4.5 < segments[0].start < 6 and 15 < segments[-1].end <= 16
    assert _words("".join(s.text for s in segments)) == _words(JFK)


def test_batched_pipeline_tokens_do_not_depend_on_batch_size(model, shared_data):
    clip = next(c for c in load_manifest(shared_data / "longform" / "manifest.jsonl") if c["audio"] == "longform.flac")
    audio = decode_audio(clip["path"])[:75 * 16000]  # 75 s: three chunks or more (the whole file cost CI 13 s)
    pipeline = BatchedInferencePipeline(model=model)
    runs = {}
    for batch_size in (1, 16):  # one chunk a call, every chunk in one call
        segments, info = pipeline.transcribe(audio, batch_size=batch_size, beam_size=1)
        runs[batch_size] = [s.tokens for s in segments]
    assert info.language == "en" and info.duration_after_vad <= info.duration
    assert len(runs[1]) >= 3 and all(tokens == runs[1] for tokens in runs.values())


def test_batched_pipeline_leaves_out_the_silence_between_speech(model, jfk_path):
    """As faster-whisper's: a chunk is the speech the VAD found, joined (the silence between was
    decoded, 5.5 s of 21 here), ``duration_after_vad`` its length, and times those of the audio."""
    from specwhisper.vad import VadOptions, get_speech_timestamps

    jfk = decode_audio(jfk_path)
    audio = np.concatenate([np.zeros(48000, np.float32), jfk, np.zeros(96000, np.float32), jfk[:64000],
                            np.zeros(48000, np.float32)])
    speech = get_speech_timestamps(audio, VadOptions(max_speech_duration_s=30, min_silence_duration_ms=160))
    segments, info = BatchedInferencePipeline(model).transcribe(audio, beam_size=1, word_timestamps=True)
    segments = list(segments)
    assert info.duration == pytest.approx(27.0)
    assert info.duration_after_vad == pytest.approx(sum(c["end"] - c["start"] for c in speech) / 16000)
    assert info.duration_after_vad < 17 and len(speech) >= 2
    assert [s.seek for s in segments] == [0]  # one chunk: 15 s of speech, from 0 s of speech
    words = segments[0].words
    assert speech[0]["start"] / 16000 - 0.1 <= words[0].start < 4 and 22 < words[-1].end <= 24.5
    assert any(w.start > 20 for w in words) and not any(15 < w.start < 20 for w in words)  # none in the gap
    assert _words(segments[0].text)[:len(_words(JFK))] == _words(JFK)


def test_batched_chunk_edges_stay_out_of_the_silence(shared_data, tiny_model_dir):
    """A chunk that ends where a long silence begins: Whisper times its end in 20 ms steps (tiny.en:
    26.42 s for a chunk ending at 26.416), and mapped back that end took the 10 s of silence after it."""
    # tiny.en as the suite loads it (float16 weights as int8): the int8 copy the name "tiny.en" pulls
    # is the same model (test_ct2_quantize.py), and measured on its own it cost CI ~25 s
    model = WhisperModel(str(tiny_model_dir), compute_type="int8", cpu_threads=2)
    longform = decode_audio(str(shared_data / "longform" / "longform.flac"))[:40 * 16000]
    gap = lambda s: np.zeros(int(s * 16000), np.float32)  # noqa: E731
    audio = np.concatenate([longform[:12 * 16000], gap(6), longform[12 * 16000:26700 * 16], gap(10),
                            longform[26700 * 16:]])
    segments = list(BatchedInferencePipeline(model).transcribe(audio)[0])  # its default call (beam 5)
    assert len(segments) >= 2
    for seg in segments:  # the chunks split at the 10 s silence (30 s of speech before it)
        assert not (seg.start < 33.0 and seg.end > 42.0), (seg.start, seg.end, seg.text)
        for t in (seg.start, seg.end):
            assert not 12.5 < t < 17.7 and not 33.0 < t < 42.6, (seg.start, seg.end, seg.text)


def test_batched_pipeline_clip_timestamps(model, jfk_path):
    audio = decode_audio(jfk_path)
    audio = np.concatenate([audio, audio])
    clips = [{"start": 0.0, "end": 11.0}, {"start": 11.0, "end": 22.0}]
    segments = list(BatchedInferencePipeline(model).transcribe(audio, clip_timestamps=clips, beam_size=1)[0])
    assert len(segments) == 2
    for segment, clip in zip(segments, clips):
        assert segment.start == clip["start"] and segment.end == clip["end"]
        assert _words(segment.text) == _words(JFK)


def test_empty_audio(tiny_model_dir):
    audio = np.asarray([], dtype="float32")
    model = WhisperModel(str(tiny_model_dir), compute_type="int8", cpu_threads=2)
    assert list(model.transcribe(audio)[0]) == []
    assert list(BatchedInferencePipeline(model=model).transcribe(audio)[0]) == []
    assert model.detect_language(audio)[0] == "en"
    assert model.supported_languages == ["en"]


def test_stereo_input_is_mixed_or_split(model, jfk_path, tmp_path):
    import soundfile

    mono = decode_audio(jfk_path)
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([mono, np.zeros_like(mono)], axis=1), 16000)
    left, right = decode_audio(str(path), split_stereo=True)
    assert np.allclose(left, mono, atol=1e-4) and not right.any()
    left8k, _ = decode_audio(str(path), sampling_rate=8000, split_stereo=True)  # the rate was ignored here
    assert left8k.size == mono.size // 2 and decode_audio(jfk_path, sampling_rate=8000).size == mono.size // 2
    both = decode_audio(jfk_path, split_stereo=True)  # a mono file: both channels, as faster-whisper's
    assert len(both) == 2 and np.array_equal(both[0], both[1]) and np.allclose(both[0], mono, atol=1e-4)
    text = "".join(s.text for s in model.transcribe(left, beam_size=1)[0])
    assert _words(text) == _words(JFK)
    with open(path, "rb") as fh:  # a file object, as faster-whisper accepts
        assert _words("".join(s.text for s in model.transcribe(io.BytesIO(fh.read()), beam_size=1)[0]))


def test_prefix_with_timestamps(model, jfk_path):
    segments = list(model.transcribe(jfk_path, prefix="And so my fellow Americans", beam_size=1)[0])
    assert segments[0].text.startswith(" And so my fellow Americans")
    assert _words("".join(s.text for s in segments)) == _words(JFK)
    assert segments[0].start == 0 and 10 < segments[-1].end <= 11


def test_clip_timestamps_decode_only_the_clips(model, jfk_path):
    segments = list(model.transcribe(jfk_path, clip_timestamps="0,3.0", beam_size=1)[0])
    text = _words("".join(s.text for s in segments))
    assert text[:3] == ["and", "so", "my"] and "country" not in text
    assert all(s.end <= 3.0 + 0.02 for s in segments)


def test_multilingual_detects_each_window(model, shared_data):
    rows = load_manifest(shared_data / "read" / "manifest.jsonl")
    spanish = next(r for r in rows if r.get("lang") == "es")
    english = next(r for r in rows if r.get("lang", "en") == "en" and r["duration_s"] > 5)
    audio = np.concatenate([decode_audio(english["path"])[:16000 * 30], np.zeros(16000 * 30, np.float32)])
    audio = np.concatenate([audio[:16000 * 30], decode_audio(spanish["path"])[:16000 * 30]])
    segments, info = model.transcribe(audio, multilingual=True, without_timestamps=True,
                                      condition_on_previous_text=False, beam_size=1)
    segments = list(segments)
    assert info.language == "en" and len(segments) == 2
    assert info.specwhisper["windows"] if "windows" in info.specwhisper else True
    assert segments[1].text.strip() and segments[1].text != segments[0].text


def test_hotwords_go_into_the_prompt(model, jfk_path):
    segments, info = model.transcribe(jfk_path, hotwords="Kennedy inaugural", beam_size=1)
    assert _words("".join(s.text for s in segments)) == _words(JFK)
    assert info.transcription_options.hotwords == "Kennedy inaugural"


def test_transcribe_signatures_match_faster_whisper():
    model_args = set(inspect.getargs(WhisperModel.transcribe.__code__).args)
    pipeline_args = set(inspect.getargs(BatchedInferencePipeline.transcribe.__code__).args)
    pipeline_args.remove("batch_size")
    assert model_args == pipeline_args
    expected = ("audio language task log_progress beam_size best_of patience length_penalty repetition_penalty "
                "no_repeat_ngram_size temperature compression_ratio_threshold log_prob_threshold "
                "no_speech_threshold condition_on_previous_text prompt_reset_on_temperature initial_prompt prefix "
                "suppress_blank suppress_tokens without_timestamps max_initial_timestamp word_timestamps "
                "prepend_punctuations append_punctuations multilingual vad_filter vad_parameters max_new_tokens "
                "chunk_length clip_timestamps hallucination_silence_threshold hotwords "
                "language_detection_threshold language_detection_segments").split()
    assert model_args == {"self", *expected}


def test_bad_input_gets_clear_errors(model, jfk_path):
    with pytest.raises(TypeError):
        model.transcribe(jfk_path, beam_sise=5)
    with pytest.raises(ValueError, match="beam_size"):
        model.transcribe(jfk_path, beam_size="5")
    with pytest.raises(TypeError, match="min_silence"):
        model.transcribe(jfk_path, vad_filter=True, vad_parameters={"min_silence": 10})
    with pytest.raises(ValueError, match="not a valid language"):
        model.transcribe(jfk_path, language="xx")
    with pytest.raises(SpecWhisperError, match="not found"):
        model.transcribe("/nonexistent.flac")
    # a file object open in text mode: its text was taken as a path (a client's text named the file
    # the service transcribed); the engine's error now, as WhisperEngine.transcribe says it
    with pytest.raises(SpecWhisperError, match="text mode"):
        model.transcribe(io.StringIO(jfk_path))
    with pytest.raises(SpecWhisperError, match="text mode"):
        model.detect_language(io.StringIO(jfk_path))


def test_batched_clip_timestamps_and_detection_segments_are_checked(model, jfk_path):
    pipeline = BatchedInferencePipeline(model)
    for bad in ("0,5", [{"start": 100000, "end": 10}], [{"begin": 0}], [3]):
        with pytest.raises(OptionError, match="clip") as info:
            pipeline.transcribe(jfk_path, clip_timestamps=bad)
        assert '"start"' in info.value.hint
    segments, _ = pipeline.transcribe(jfk_path, clip_timestamps=[{"start": 0.0, "end": 5.0}])
    assert "fellow americans" in " ".join(s.text for s in segments).lower()
    with pytest.raises(OptionError, match="language_detection_segments"):
        model.detect_language(jfk_path, language_detection_segments=0)


def test_detect_language_from_features_equals_from_audio(model, jfk_path):
    """faster-whisper's detect_language takes log-mel features instead of audio; the same
    features as the audio's give the same answer, bit for bit."""
    from specwhisper.features import log_mel_spectrogram

    audio = decode_audio(jfk_path)
    expected = model.detect_language(audio)
    features = log_mel_spectrogram(audio, n_mels=80)[:, :-1]  # as transcribe reads it: the last frame has no audio
    assert model.detect_language(features=features) == expected
    assert model.detect_language(features=features[None])[0] == expected[0] == "en"  # [1, n_mels, frames]
    for bad in (features[:40], features.astype(np.int16), np.full((80, 10), np.nan, np.float32), "x", [[1.0], [2]]):
        with pytest.raises(OptionError, match="features"):
            model.detect_language(features=bad)
    with pytest.raises(OptionError, match="language_detection_segments"):
        model.detect_language(features=features, language_detection_segments=0)
    assert model.detect_language(features=features, language_detection_threshold=None) == expected  # first decides
    for bad in ({"language_detection_threshold": "0.5"}, {"language_detection_segments": None}):
        with pytest.raises(OptionError, match=next(iter(bad))):  # a TypeError deep in the vote before
            model.detect_language(audio, **bad)


@pytest.mark.parametrize("bad", [0, -5, 31, 40, 10.0, 10.5, "10", True])
def test_chunk_length_outside_whole_seconds_1_to_30_is_a_clear_error(model, jfk_path, bad):
    """faster-whisper 1.2.1 hangs (0), repeats its first segment forever (negative), raises a
    TypeError deep in its loop (any float) or skips audio (above 30: the encoder sees 30 s, seek
    moves by the whole length); ours refuses each at the call, on empty audio too."""
    pipeline = BatchedInferencePipeline(model)
    for audio in (jfk_path, np.zeros(0, np.float32)):
        for transcriber in (model, pipeline):  # the batched pipeline's VAD would cut spans of that length
            with pytest.raises(OptionError, match="chunk_length must be whole seconds from 1 to 30"):
                transcriber.transcribe(audio, chunk_length=bad)


def test_chunk_length_conflicts_are_clear_errors(model, jfk_path):
    with pytest.raises(OptionError, match="audio_ctx"):  # both would set the window
        model.transcribe(jfk_path, chunk_length=10, audio_ctx="auto")
    with pytest.raises(OptionError, match="chunk_length is not an option of a live stream"):
        model.engine.stream(chunk_length=10)


@pytest.fixture(scope="module")
def read_clip(shared_data) -> str:
    """A 14.6 s LibriSpeech read clip: two windows at chunk_length=10."""
    return str(shared_data / "read" / "audio" / "librispeech_train-clean-100_1040-133433-0000.flac")


def test_chunk_length_windows_speculate_exactly(model, read_clip):
    """``chunk_length=10``: windows of 10 s, and the tokens with speculation (prompt lookup, the
    facade's default) equal those without, in the same numerics; a numpy integer is taken too."""
    kw = dict(beam_size=1, language="en", temperature=0.0, numerics="batch-invariant")
    drafted, info = model.transcribe(read_clip, chunk_length=np.int64(10), **kw)
    drafted = list(drafted)
    assert info.specwhisper["stats"]["verify_calls"] > 0  # drafts were verified
    assert {s.seek for s in drafted} == {0, 1000} and drafted[-1].end >= 14
    assert all(s.start < s.seek / 100 + 10 for s in drafted)  # each segment starts inside its window
    plain, _ = model.transcribe(read_clip, chunk_length=10, speculation=False, **kw)
    plain = list(plain)
    assert [(s.seek, s.start, s.end, s.tokens) for s in drafted] == [(s.seek, s.start, s.end, s.tokens) for s in plain]


# Without timestamps (4 s) with -m full: the windows' exactness under drafts is the same check, and
# the timestamped run is the one whose window starts follow the tokens
@pytest.mark.parametrize("timestamps", ["on", pytest.param("off", marks=pytest.mark.full)])
def test_chunk_length_is_exact_under_an_adversarial_drafter(model, read_clip, timestamps):
    """The engine with random ids (out-of-vocabulary ones too) drafted before prompt lookup:
    ``chunk_length=10`` windows keep the tokens of ``--no-speculation``, window for window."""
    from adversarial import RandomIds
    from specwhisper import WhisperEngine

    lm = model.engine.lm
    engine = WhisperEngine(loaded=lm, drafters=[RandomIds(11, lm.vocab_size)])
    kw = dict(language="en", chunk_length=10, numerics="batch-invariant", timestamps=timestamps,
              condition_on_previous_text=True)
    drafted = engine.transcribe(read_clip, **kw)
    plain = engine.transcribe(read_clip, speculation=False, **kw)
    assert drafted.stats["drafted"] > 0 and drafted.numerics == plain.numerics == "batch-invariant"
    starts = [w.start_s for w in drafted.windows]
    assert starts == [w.start_s for w in plain.windows]
    assert starts == [0.0, 10.0] if timestamps == "off" else (len(starts) >= 2 and 0 < starts[1] <= 10.0)
    assert [w.tokens for w in drafted.windows] == [w.tokens for w in plain.windows]


def test_format_timestamp():
    assert format_timestamp(3661.5) == "01:01:01.500"
    assert format_timestamp(5.25) == "00:05.250"
    assert format_timestamp(5.25, always_include_hours=True, decimal_marker=",") == "00:00:05,250"


def test_faster_whisper_attributes_names_and_errors(model, jfk_path, tiny_model_dir):
    """What migrated scripts read and catch: ``model.model.is_multilingual``, the feature
    extractor's constants and features, faster-whisper's size names (from the hub where no
    registry entry holds them), ValueError for a size no one has, CT2 load keywords said unused."""
    from specwhisper import available_models, download_model

    assert model.model.is_multilingual and model.frames_per_second == 100 and model.max_length == 448
    fe = model.feature_extractor
    assert (fe.sampling_rate, fe.hop_length, fe.n_samples, fe.nb_max_frames) == (16000, 160, 480000, 3000)
    features = fe(decode_audio(jfk_path))
    assert features.shape == (80, 1101) and np.array_equal(features, fe(decode_audio(jfk_path)))
    assert model.hf_tokenizer.encode(" country", add_special_tokens=False).ids == \
        model.engine.tokenizer.encode(" country")
    assert {"tiny.en", "base", "large-v3", "turbo"} <= set(available_models())
    with pytest.raises(ValueError, match="unknown model 'huge-v9'"):
        download_model("huge-v9")
    with pytest.raises(TypeError, match="unknown option 'flash_atention'") as info:
        WhisperModel("tiny.en", flash_atention=True)
    assert info.value.where == "WhisperModel"
    with pytest.warns(UserWarning, match="flash_attention: CTranslate2 load options"):
        assert WhisperModel(str(tiny_model_dir), compute_type="int8", cpu_threads=2,
                            flash_attention=True).model.is_multilingual is False
    with pytest.raises(ValueError):
        format_timestamp(-1.0)


def test_a_model_from_in_memory_files(tiny_model_dir, jfk_path, tmp_path, monkeypatch):
    """faster-whisper's ``files=``: the model's files as bytes or file objects; the same text as the
    directory, the cache copy made once and reused, bad sets refused clearly."""
    from specwhisper import model_store

    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "cache"))
    names = [p.name for p in tiny_model_dir.iterdir() if p.is_file() and not p.name.endswith(".onnx")]
    files = {name: (tiny_model_dir / name).read_bytes() for name in names}
    files["config.json"] = io.BytesIO(files["config.json"])  # a file object works too
    # pinned: "auto" choices are measured per model directory, and these are two directories (in a
    # fresh cache: no self-test, which single-row numerics do not need, and no thread measurement)
    pinned = {"encoder": "ct2", "selftest": False, "decoder_threads": 2}
    from_files = WhisperModel("my-tiny", cpu_threads=2, files=files, **pinned)
    from_dir = WhisperModel(str(tiny_model_dir), cpu_threads=2, **pinned)
    ours, _ = from_files.transcribe(jfk_path, beam_size=1, language="en", numerics="single-row")
    theirs, _ = from_dir.transcribe(jfk_path, beam_size=1, language="en", numerics="single-row")
    assert [s.tokens for s in ours] == [s.tokens for s in theirs]
    copies = list((tmp_path / "cache" / "models").glob("memory-*"))
    assert len(copies) == 1 and (copies[0].stat().st_mode & 0o077) == 0  # this user's only
    again = {name: (tiny_model_dir / name).read_bytes() for name in names}
    assert model_store.model_from_files(again) == copies[0]  # the same files: the same copy
    with pytest.raises(SpecWhisperError, match="lacks model.bin"):
        WhisperModel("x", files={k: v for k, v in again.items() if k != "model.bin"})
    with pytest.raises(SpecWhisperError, match="not a plain file name"):
        WhisperModel("x", files={"../model.bin": b"", **again})
    with pytest.raises(SpecWhisperError, match="not bytes"):
        WhisperModel("x", files={**again, "model.bin": 3})


def test_an_english_only_model_takes_any_language_as_english(tiny_engine):
    """faster-whisper 1.2 logs and decodes in English whatever ``language`` an English-only model is
    given (a code or not); the engine's stricter check must not leak into the facade."""
    model = WhisperModel.__new__(WhisperModel)
    model.engine = tiny_engine  # the facade over an engine already loaded (as WhisperModel builds it)
    from specwhisper.whisper_model import _checked_language

    for language in ("fr", "english", "xx"):
        with pytest.warns(UserWarning, match=f"English-only but language={language!r}: using 'en'"):
            assert _checked_language(model, language) == "en"
    assert _checked_language(model, "en") == "en" and _checked_language(model, None) is None
