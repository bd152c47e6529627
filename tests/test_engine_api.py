"""The Python API: result fields, numerics recorded, thread safety, and the numerics policy."""

from __future__ import annotations

import json
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adversarial import Oracle
from decoding import AVX2_EPYC_COST
from specwhisper import WhisperEngine
from specwhisper.audio import SAMPLE_RATE, load_audio
from specwhisper.errors import OptionError
from specwhisper.policy import AdaptiveDraftLength, VerifyCost, choose_numerics, realised_speedup


def test_result_fields_and_timings(base_engine, shared_data):
    result = base_engine.transcribe(shared_data / "real/audio/jfk.flac")
    assert result.language == "en" and result.language_probability > 0.5
    assert result.numerics in ("single-row", "batch-invariant")
    t = result.timings
    assert t["encoder_s"] > 0 and t["decoder_s"] >= t["prefill_s"] > 0
    assert t["total_s"] >= t["features_s"] + t["encoder_s"] + t["decoder_s"] - 1e-6
    assert result.stats["tokens"] == len(result.tokens) + 1  # + EOT
    assert result.row_floor == base_engine.row_floor
    # a notebook shows the repr: a line of what was said and how, not every token (it was 3-23 KB)
    shown = repr(result)
    assert len(shown) < 300 and "And so my fellow Americans" in shown and "language='en'" in shown
    assert len(repr(result.windows[0])) < 200 and "tokens=" in repr(result.windows[0])


def test_batch_size_with_timestamps_says_it_does_nothing(base_engine, shared_data):
    """``batch_size`` decodes independent windows together; a timestamped window starts where the
    one before ended, so there it was taken without a word (a new user expected batching)."""
    jfk = shared_data / "real/audio/jfk.flac"
    with pytest.warns(UserWarning, match="batch_size=4 has no effect with timestamps"):
        timed = base_engine.transcribe(jfk, language="en", timestamps="on", batch_size=4)
    assert timed.tokens == base_engine.transcribe(jfk, language="en", timestamps="on").tokens


def test_concurrent_calls_on_one_model(base_engine, shared_data):
    two = [shared_data / "real/audio/jfk.flac", shared_data / "real/audio/librispeech_1272-128104-0000.flac"]
    sequential = [base_engine.transcribe(p, language="en", numerics="single-row").tokens for p in two]
    with ThreadPoolExecutor(max_workers=4) as pool:  # each clip twice, four calls at once
        parallel = list(pool.map(lambda p: base_engine.transcribe(p, language="en", numerics="single-row").tokens,
                                 two * 2))
    assert parallel == sequential * 2


def test_policy_prefers_single_row_without_evidence_and_learns():
    cost = VerifyCost.default("cpu")
    weak = AdaptiveDraftLength(cost, row_floor=3, prior=0.3, prior_coverage=0.3)
    assert weak.expected_speedup() < 1.0
    assert choose_numerics("auto", True, 3, True, weak.expected_speedup())[0] == "single-row"
    for _ in range(60):  # a drafter that is right 8 tokens at a time, every round
        weak.record(8, 8)
    assert weak.expected_speedup() > 2.0 and weak.draft_len() >= 8
    assert choose_numerics("auto", True, 3, True, weak.expected_speedup())[0] == "batch-invariant"
    for _ in range(200):  # now it proposes nothing useful
        weak.record(0, 0)
    assert weak.expected_speedup() < 1.0


class _SureDrafter:
    """Proposes ``text`` from where the tokens are, each token with ``confidence``."""

    confident_reach = True

    def __init__(self, text: list[int], confidence: float) -> None:
        self.text, self.confidence, self.kept, self.last_confidence = text, confidence, None, []

    def propose(self, tokens, k):
        draft = self.text[len(tokens):len(tokens) + k]
        self.last_confidence = [self.confidence] * len(draft)
        return draft

    def keep(self, n):
        self.kept = n
        del self.last_confidence[n:]


def test_a_sure_drafter_is_verified_past_k_where_the_wider_call_pays():
    """A token map recalling a command said before is sure of all of it: its draft is verified in
    one wide call where the policy's K (learned from every round) would make several narrow ones;
    a token it is unsure of is not verified where a plain step pays more; and its confidence is
    worth what the rounds measure: a drafter sure of wrong drafts is soon cut to what pays."""
    from specwhisper.draft_reach import propose
    from specwhisper.drafters.chain import DrafterChain

    policy = AdaptiveDraftLength(VerifyCost(AVX2_EPYC_COST), row_floor=1, k_max=16)
    for _ in range(30):  # rounds of 3 drafts with the third often wrong: K stays short
        policy.record(3, 2)
        policy.record(3, 3)
    k = policy.draft_len()
    assert 1 < k < 8
    text = list(range(100, 130))
    sure, unsure = _SureDrafter(text, 0.99), _SureDrafter(text, 0.3)
    long = propose(DrafterChain([sure]), policy, text[:1], k, room=20)
    assert len(long) >= 10 and long == text[1:1 + len(long)] and len(sure.last_confidence) == len(long)
    assert len(propose(DrafterChain([unsure]), policy, text[:1], k, room=20)) < k  # 2 rows cost 1.28 of 1
    assert unsure.kept == len(unsure.last_confidence)  # told where it was cut
    assert len(propose(DrafterChain([sure]), policy, text[:1], k, room=5)) <= 5  # never past the room left
    # a drafter that does not stop where unsure (prompt lookup, a draft model) is asked for K only
    plain = type("Plain", (), {"name": "plain", "propose": lambda self, tokens, n: text[len(tokens):len(tokens) + n]})()
    assert propose(DrafterChain([plain]), policy, text[:1], k, room=20) == text[1:1 + k]
    # what the wide call verified past K does not teach K (it was drafted because it was sure)
    long = propose(DrafterChain([sure]), policy, text[:1], k, room=20)
    before = policy.acceptance()[k:]
    policy.record(len(long), len(long))
    assert policy.acceptance()[k:] == before
    # sure and wrong: its first draft is rejected round after round, and its drafts shrink to none
    lengths = []
    for _ in range(40):
        drafts = propose(DrafterChain([sure]), policy, text[:1], k, room=20)
        policy.record(len(drafts), 0)
        lengths.append(len(drafts))
    assert lengths[0] >= 10 and lengths[-1] == 0
    # confidences that are not probabilities (a drafter of one's own): the policy's K, no error
    odd = _SureDrafter(text, 0.99)
    odd.propose = lambda tokens, n: (setattr(odd, "last_confidence", ["sure"] * n), text[1:1 + n])[1]
    assert propose(DrafterChain([odd]), policy, text[:1], k, room=20) == text[1:1 + k]


def test_numerics_choice_rules():
    assert choose_numerics("single-row", True, 3, True, 9.0)[0] == "single-row"
    assert choose_numerics("batch-invariant", False, 3, False, 0.0)[0] == "batch-invariant"
    assert choose_numerics("batch-invariant", True, None, True, 9.0)[0] == "single-row"  # self-test failed
    assert choose_numerics("auto", False, 3, True, 9.0)[0] == "single-row"
    assert choose_numerics("auto", True, 3, False, 9.0)[0] == "single-row"
    # the loop pays more than the calibrated curve: a window is speculated only for a clear gain
    assert choose_numerics("auto", True, 3, True, 1.05)[0] == "single-row"
    assert choose_numerics("auto", True, 3, True, 1.2)[0] == "batch-invariant"
    # a draft length the caller fixed is taken to pay, and the reason says so (not "infx")
    assert choose_numerics("auto", True, 3, True, float("inf")) == (
        "batch-invariant", "a draft-length rule that assumes speculation pays (e.g. a fixed draft length)")


def test_a_draft_length_that_cannot_draft_is_said(tiny_engine):
    """A fixed draft length with options that decode without drafts did nothing and said nothing
    (a helper as a skeptical user, session 59)."""
    audio = np.zeros(SAMPLE_RATE, np.float32)
    for options, why in ((dict(numerics="single-row"), "single-row numerics"),
                         (dict(speculation=False), "speculation off"), (dict(beam_size=2), "beam search")):
        with pytest.warns(UserWarning, match=f"draft_len=3 has no effect: {why}"):
            tiny_engine.transcribe(audio, draft_len=3, temperature=0.0, **options)
    with warnings.catch_warnings():  # beam search with the ladder: the fallback attempts sample, and draft
        warnings.simplefilter("error")
        tiny_engine.transcribe(audio, draft_len=3, beam_size=2, temperature=(0.0, 0.4))


def test_each_window_logs_its_predicted_and_realised_speedup(base_engine, shared_data):
    """Beside the speedup the policy expected when a window began, what its calls delivered in
    the same units: tokens after the first over calls priced by the policy's curve (1.0 = single-row)."""
    # long-form's first 65 s (three windows; the whole file cost CI 8 s more)
    audio = load_audio(shared_data / "longform/longform.flac")[:65 * SAMPLE_RATE]
    result = base_engine.transcribe(audio, language="en", numerics="batch-invariant")
    assert len(result.windows) >= 3
    for window in result.windows:
        s = window.stats
        assert s["predicted_speedup"] is None or s["predicted_speedup"] > 0
        calls = {int(rows): n for rows, n in s["calls_by_rows"].items()}
        priced = s["steps"] + sum(n * base_engine.verify_cost(rows) for rows, n in calls.items())
        assert calls and s["realised_speedup"] == pytest.approx((s["tokens"] - 1) / priced)
    # with drafts that are all right, the realised figure shows the gain (the bigram filler alone may
    # not pay: on the Xeon every call has at least 3 rows)
    jfk = shared_data / "real/audio/jfk.flac"
    greedy = base_engine.transcribe(jfk, language="en", numerics="batch-invariant", speculation=False)
    perfect = WhisperEngine(loaded=base_engine.lm, prompt_lookup=False,
                            drafters=[Oracle(greedy.windows[0].tokens, base_engine.tokenizer.special.eot)])
    drafted = perfect.transcribe(jfk, language="en", numerics="batch-invariant")
    assert drafted.tokens == greedy.tokens and drafted.windows[0].stats["realised_speedup"] > 1.0
    pinned = base_engine.transcribe(shared_data / "real/audio/jfk.flac", language="en", numerics="single-row")
    assert [w.stats["realised_speedup"] for w in pinned.windows] == [pytest.approx(1.0)]
    json.dumps(pinned.to_dict())  # logged in the results
    assert realised_speedup(5, 0, {}, VerifyCost({1: 1.0})) is None
    assert realised_speedup(9, 2, {3: 2}, VerifyCost({1: 1.0, 3: 1.5})) == pytest.approx(8 / 5)


def test_single_row_windows_are_replayed_in_the_shadow_with_and_without_timestamps(base_engine, shared_data):
    """A timestamped single-row window runs CTranslate2's own greedy loop, and its drafters still
    replay it in the shadow, so that the policy learns from it what speculation would have given (a
    regression once left timestamped long-form windows unlearned: the policy kept its prior for
    every window); a window without timestamps, on 1-row steps, too."""
    engine = WhisperEngine(loaded=base_engine.lm)  # prompt lookup on, a policy of its own
    prior = engine.policy.expected_speedup()
    audio = load_audio(shared_data / "longform/longform.flac")[:65 * SAMPLE_RATE]  # three windows
    long_form = engine.transcribe(audio, language="en", numerics="single-row")
    assert len(long_form.windows) > 1 and all(w.stats["shadow_rounds"] > 0 for w in long_form.windows)
    assert engine.policy.expected_speedup() != prior
    clip = engine.transcribe(shared_data / "real/audio/jfk.flac", language="en", numerics="single-row")
    assert clip.windows[0].stats["shadow_rounds"] > 0 and clip.windows[0].stats["verify_calls"] == 0


def test_verify_cost_interpolates():
    cost = VerifyCost({1: 1.0, 2: 1.6, 4: 1.8})
    assert cost(1) == 1.0 and cost(3) == pytest.approx(1.7) and cost(10) == 1.8


def test_without_step_api_transcribes_through_generate(base_model_dir, base_engine, shared_data, monkeypatch):
    """Upstream CTranslate2 (macOS, ARM, Windows) has no step API: generate() still transcribes."""
    import specwhisper.backend as backend
    from specwhisper import WhisperEngine

    monkeypatch.setattr(backend, "step_api_available", lambda: False)
    with pytest.warns(UserWarning, match="speculative decoding is unavailable"):
        engine = WhisperEngine(base_model_dir, threads=2, encoder="onnx")  # base_engine's encoder
    path = shared_data / "real/audio/jfk.flac"
    result = engine.transcribe(path, language="en")
    assert result.numerics == "native" and not result.speculation_available
    assert result.tokens == base_engine.transcribe(path, language="en", numerics="single-row").tokens


def test_decoder_threads_change_speed_not_logits(base_engine, shared_data):
    """The decoder may run on its own instance with fewer threads; its logits must be bitwise the
    encoder instance's, for 1-row steps and batched calls alike, or the split would change text."""
    import numpy as np

    from specwhisper.audio import load_audio
    from specwhisper.features import log_mel_spectrogram, window_features

    lm = base_engine.lm
    assert 1 <= lm.decoder_threads <= lm.threads
    assert (lm.decoder is lm.model) == (lm.decoder_threads == lm.threads)
    mel = window_features(log_mel_spectrogram(load_audio(shared_data / "real/audio/jfk.flac"), lm.n_mels), 0)
    encoder_output = lm.encode(mel)
    prompt = lm.tokenizer.sot_sequence("en")
    tokens = lm.tokenizer.encode(" And so my fellow Americans")
    outputs = []
    for model in (lm.model, lm.decoder):
        state, first = model.prefill(encoder_output, prompt)
        step = model.forward_step(state, tokens[0])
        batch = model.forward_batch(state, tokens[1:5])
        outputs.append([np.asarray(first), np.asarray(step), np.asarray(batch)])
    for a, b in zip(*outputs):
        assert np.array_equal(a, b)
    result = base_engine.transcribe(shared_data / "real/audio/jfk.flac")
    assert result.to_dict()["decoder_threads"] == lm.decoder_threads


def test_decoder_threads_pinned_uses_one_instance(base_model_dir):
    from specwhisper.backend import LoadedModel

    lm = LoadedModel(base_model_dir, compute_type="int8", threads=2, decoder_threads=2)
    assert lm.decoder is lm.model and lm.decoder_threads == 2
    with pytest.raises(OptionError, match="decoder threads"):
        LoadedModel(base_model_dir, compute_type="int8", threads=2, decoder_threads=0)


def test_engines_can_share_one_loaded_model(base_engine, shared_data):
    """A second engine (other drafters) on the first one's model: nothing is loaded again, and the
    tokens are the first engine's."""
    from specwhisper import WhisperEngine

    other = WhisperEngine(loaded=base_engine.lm, prompt_lookup=False)
    assert other.lm is base_engine.lm and other.model_dir == base_engine.model_dir
    assert other.row_floor == base_engine.row_floor
    path = shared_data / "real/audio/jfk.flac"
    for numerics in ("single-row", "batch-invariant"):
        assert other.transcribe(path, language="en", numerics=numerics).tokens == \
            base_engine.transcribe(path, language="en", numerics=numerics).tokens
    # settings that belong to the model: the shared model's own are accepted, others refused
    lm = base_engine.lm
    same = WhisperEngine(loaded=lm, prompt_lookup=False, encoder=lm.encoder_choice.name,
                         batch_decoder=lm.batch_decoder_choice, decoder_threads=lm.decoder_threads)
    assert same.lm is lm
    other_encoder = "onnx" if lm.encoder_choice.name == "ct2" else "ct2"
    with pytest.raises(OptionError, match=f"(?s)encoder='{other_encoder}'.*load the model again"):
        WhisperEngine(loaded=lm, encoder=other_encoder)
    other_threads = lm.decoder_threads % 2 + 1  # 1 or 2: within what any machine may ask for
    with pytest.raises(OptionError, match=f"decoder_threads={other_threads}"):
        WhisperEngine(loaded=lm, decoder_threads=other_threads)
    with pytest.raises(OptionError, match="unknown encoder 'bogus'"):
        WhisperEngine(loaded=lm, encoder="bogus")


def test_a_first_window_of_noise_does_not_decide_the_language(base_engine, shared_data):
    """35 s of faint noise before jfk: the first window alone said Nynorsk (p 0.33, from the noise)
    and jfk was lost, by faster-whisper too. While no window is sure (p <= 0.5) up to three are
    asked, as faster-whisper's language_detection_segments=3 would; the second says English."""
    import numpy as np

    from specwhisper.audio import load_audio

    rng = np.random.default_rng(0)
    jfk = load_audio(shared_data / "real/audio/jfk.flac")
    noise = (rng.standard_normal(35 * 16000 + jfk.size) * 10 ** (-55 / 20)).astype(np.float32)
    audio = noise + np.concatenate([np.zeros(35 * 16000, np.float32), jfk])
    alone = base_engine.transcription(audio, language_detection_segments=1)
    assert alone.language_probability <= 0.5 and alone.language != "en"  # the case: the noise decides alone
    assert base_engine.transcription(audio).language == "en"
