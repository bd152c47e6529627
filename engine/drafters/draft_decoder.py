"""The draft model's per-window state: its encoder input and its one rolling decoder state.

Both the serial drafter and the ahead thread drive the same ``DraftDecoder``: the draft model
encodes its own features for the window (``draft_encoder_input``, a short window where the audio
is short), prefills its prompt once, and from then on is only rolled back (``truncate_to_step``)
and fed, never re-prefilled or cloned. Keeping it apart lets either driver use it unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..audio_ctx import SHORT_SIZES
from ..backend import LoadedModel, to_host
from ..features import N_FRAMES, content_frames, log_mel_spectrogram, short_window_features, window_features
from ..model_limits import MAX_POSITIONS
from .draft_cost import DraftModelStats

DRAFT_MARGIN_FRAMES = 200  # trailing silence (mel frames) the draft encoder's short window keeps


class DraftDecoder:
    """The draft model's decoder state for one window: the draft ids it holds after the prompt and
    its greedy prediction after them. Rolled back with ``truncate_to_step``, never re-prefilled."""

    def __init__(self, lm: LoadedModel, stats: DraftModelStats) -> None:
        self._model = lm.decoder
        self._suppress = lm.suppress
        self._suppress_first = sorted(set(lm.suppress) | set(lm.suppress_begin))
        self.eot = lm.tokenizer.special.eot
        self.stats = stats
        self.state = None
        self.prompt_len = 0
        self.fed: list[int] = []  # draft ids in the state after the prompt
        self.pred: int | None = None  # the draft model's next token after ``fed`` (None: unknown)
        self.first: int | None = None  # its first token after the prompt

    def start(self, encoder_output, prompt: list[int]) -> None:
        t0 = time.perf_counter()
        self.state, logits = self._model.prefill(encoder_output, prompt)
        scores = to_host(logits).reshape(-1).astype(np.float32, copy=True)
        scores[self._suppress_first] = -np.inf
        self.first = self.pred = int(scores.argmax())
        self.prompt_len = len(prompt)
        self.fed = []
        self.stats.windows += 1
        self.stats.prefill_s += time.perf_counter() - t0

    def close(self) -> None:
        self.state = None  # frees the window's KV cache
        self.fed = []
        self.pred = None

    def room(self, extra: int = 0) -> int:
        """Tokens that can still be fed after ``fed`` plus ``extra``."""
        return MAX_POSITIONS - self.prompt_len - len(self.fed) - extra - 1

    def holds(self, target: Sequence[int]) -> bool:
        """Whether ``fed`` plus the prediction begins with ``target``, so that what follows drafts on."""
        chain = self.fed if self.pred is None else [*self.fed, self.pred]
        return len(chain) > len(target) and chain[:len(target)] == list(target)

    def sync(self, target: list[int]) -> None:
        """Make the state hold exactly ``target`` after the prompt, with the prediction that follows."""
        fed = self.fed
        common = 0
        limit = min(len(fed), len(target))
        while common < limit and fed[common] == target[common]:
            common += 1
        if common < len(fed):
            self.state.truncate_to_step(self.prompt_len + common)
            del fed[common:]
            self.pred = None
            self.stats.rollbacks += 1
        todo = target[common:]
        if not todo and self.pred is None:
            if fed:  # the prediction after the kept prefix is gone: feed its last token again
                self.state.truncate_to_step(self.prompt_len + len(fed) - 1)
                todo = [fed.pop()]
            else:
                self.pred = self.first
        if todo:
            self.feed(todo)

    def feed(self, tokens: list[int]) -> None:
        t0 = time.perf_counter()
        if len(tokens) == 1:
            self.pred = int(self._model.forward_step_greedy(self.state, tokens[0], self._suppress))
        else:
            self.pred = int(self._model.forward_batch_greedy(self.state, tokens, self._suppress)[-1])
        self.fed.extend(tokens)
        self.stats.calls += 1
        self.stats.rows += len(tokens)
        self.stats.decode_s += time.perf_counter() - t0


def draft_frames(n_samples: int) -> int:
    """Mel frames the draft model's encoder sees for a window of ``n_samples`` (16 kHz).

    Its numerics never reach the text (the main model verifies every draft), so a short encoder
    window is safe: it only has to draft well. ``DRAFT_MARGIN_FRAMES`` of trailing silence keep
    a short window from looping before the utterance ends (see ``audio_ctx``).
    """
    need = n_samples // 160 + DRAFT_MARGIN_FRAMES
    return next((s for s in SHORT_SIZES if s >= need), N_FRAMES)


def draft_encoder_input(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """The draft encoder's features for one window's audio (a short window where the audio is short)."""
    audio = np.asarray(audio, dtype=np.float32)
    frames = draft_frames(audio.size)
    if frames < N_FRAMES:
        return short_window_features(audio, frames, n_mels=n_mels)
    mel = log_mel_spectrogram(audio, n_mels=n_mels)
    return window_features(mel[:, :content_frames(mel)], 0)
