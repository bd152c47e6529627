"""Test helpers that run the engine's one decoding loop on a cached encoder output."""

from __future__ import annotations

import numpy as np

from specwhisper.audio import load_audio
from specwhisper.decoder import decode_window
from specwhisper.drafters.base import NullDrafter, WindowContext
from specwhisper.features import content_frames, log_mel_spectrogram, window_features
from specwhisper.policy import FixedDraftLength
from specwhisper.stats import DecodeStats
from specwhisper.verifier import DecoderSession

_ENCODED: dict = {}

# base's decoder calls on a 2-core AMD EPYC without AVX-512 (the invariant decoder, in fork steps):
# a cost curve pinned where a test needs that CPU's prices whatever CPU it runs on
AVX2_EPYC_COST = {1: 0.74, 2: 0.95, 3: 1.17, 4: 1.27, 6: 1.56, 8: 1.84, 12: 2.31, 17: 2.97}


def encode_window(engine, path: str, start_frame: int = 0):
    """Encoder output of the 30 s window of ``path`` that starts at ``start_frame`` (cached per session)."""
    key = (id(engine), path, start_frame)
    if key not in _ENCODED:
        mel = log_mel_spectrogram(load_audio(path), n_mels=engine.lm.n_mels)
        n = content_frames(mel)
        _ENCODED[key] = engine.lm.encode(window_features(mel[:, :min(start_frame + 3000, n)], start_frame))
    return _ENCODED[key]


def encode_clip(engine, path: str):
    """Encoder output of a single-window clip, features windowed as the engine does (cached per session)."""
    key = (id(engine), path)
    if key not in _ENCODED:
        _ENCODED[key] = _encode(engine, path)
    return _ENCODED[key]


def _encode(engine, path: str):
    audio = load_audio(path)
    mel = log_mel_spectrogram(audio, n_mels=engine.lm.n_mels)
    return engine.lm.encode(window_features(mel[:, :content_frames(mel)], 0)), audio


def decode(engine, encoder_output, numerics: str, drafter=None, k: int = 4, language: str = "en",
           filler=None, sampler=None, timestamps: bool = False, audio=None, prefix: list[int] | None = None,
           suppress: list[int] | None = None, max_new: int | None = None) -> tuple[list[int], DecodeStats]:
    """Tokens (EOT excluded) and stats of one window through ``decode_window`` (``audio``: the
    window's waveform, for drafters that run their own encoder; ``prefix``: forced tokens at the
    prompt's end; ``suppress``: ids never emitted instead of the model's; ``max_new``: the window's
    token limit, default the engine's, lower to make drafts run past it)."""
    tok = engine.tokenizer
    prompt = tok.sot_sequence(language, timestamps=timestamps) + list(prefix or [])
    eot = tok.special.eot
    max_new = max_new or min(224, 448 - (len(prompt) - 1))
    session = DecoderSession(engine.lm, encoder_output, prompt, numerics, row_floor=engine.row_floor or 2,
                             row_ceiling=engine.row_ceiling, sampler=sampler,
                             rules=engine.window_decoder.timestamp_rules if timestamps else None, prefix=prefix or (),
                             suppress=suppress)
    drafter = drafter or NullDrafter()
    drafter.begin(WindowContext(prompt=tuple(prompt), eot=eot, max_new_tokens=max_new, audio=audio))
    stats = DecodeStats()
    tokens = decode_window(session, drafter, FixedDraftLength(k), max_new, eot, stats,
                           filler or (lambda _t: eot))
    return [t for t in tokens if t != eot], stats


def generate_tokens(engine, encoder_output, language: str = "en", timestamps: bool = False) -> list[int]:
    """The fork's own greedy ``generate`` (CT2's native decoding, its own timestamp rules)."""
    prompt = engine.tokenizer.sot_sequence(language, timestamps=timestamps)
    return list(engine.lm.model.generate(encoder_output, [prompt], beam_size=1)[0].sequences_ids[0])


def top2_margin(engine, encoder_output, tokens: list[int], position: int, language: str = "en") -> float:
    """Top-1 minus top-2 logit at ``position`` under single-row numerics (for reporting near-ties)."""
    model = engine.lm.decoder
    prompt = engine.tokenizer.sot_sequence(language)
    state, _ = model.prefill(encoder_output, prompt[:-1])
    logits = np.asarray(model.forward_step(state, prompt[-1])).reshape(-1)
    for t in tokens[:position]:
        logits = np.asarray(model.forward_step(state, t)).reshape(-1)
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])
