"""The decoder session of one window: prefill, single-row steps, and exact batched verification.

This is the only place that drives the step API. Two numerics:

* ``single-row``: prefill the prompt, then 1-row steps, exactly as the fork's ``generate``
  decodes greedily (the fastest greedy).
* ``batch-invariant``: prefill the prompt, then every decoder call carries at least
  ``row_floor`` rows. The self-test shows that from that size on a token's logits are bitwise the
  same whatever the call's size and the token's row, so the emitted tokens cannot depend on what
  was drafted: drafts only decide how many tokens one call confirms.

With a ``PositionSampler`` the session samples instead (temperature > 0): each position's token
is a fixed function of its logits and the seed, so the same argument holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .backend import MAX_POSITIONS, LoadedModel, to_host
from .sampling import PositionSampler

Numerics = Literal["single-row", "batch-invariant"]


class DecoderSession:
    """KV-cached decoding of one window; never cloned, rolled back with ``truncate_to_step``."""

    def __init__(self, lm: LoadedModel, encoder_output, prompt: Sequence[int], numerics: Numerics,
                 row_floor: int = 2, row_ceiling: int = 17, sampler: PositionSampler | None = None) -> None:
        """``sampler``: pick tokens by temperature sampling with noise fixed per position (see
        ``sampling``) instead of greedily; everything else, exactness included, is unchanged."""
        self._lm = lm
        self._sampler = sampler
        self._model = lm.decoder
        self._encoder_output = encoder_output
        self._prompt = list(prompt)
        self.numerics = numerics
        self.row_floor = max(2, int(row_floor))
        self.row_ceiling = max(self.row_floor, int(row_ceiling))
        self._suppress = lm.suppress
        self._vocab = lm.vocab_size
        self._state = None

    def start(self) -> int:
        """Prefill the whole prompt in one call and return the first token (blank and EOT suppressed).

        The fork's ``generate`` starts the same way (its first token comes from the multi-row prompt
        call, then 1-row steps follow): on 40 of 40 read-speech clips this matched it, while feeding
        the prompt's last token as a 1-row step differed on 2 near-ties.
        """
        self._state, logits = self._model.prefill(self._encoder_output, self._prompt)
        scores = self._suppressed(to_host(logits))
        scores[self._lm.suppress_begin] = -np.inf
        return int(scores.argmax()) if self._sampler is None else self._sampler.pick(scores, 0)

    def step(self, token: int) -> int:
        """Feed one token in a 1-row call; return the next token (greedy's, or the sampler's)."""
        if self._sampler is None:
            return int(self._model.forward_step_greedy(self._state, token, self._suppress))
        position = self._state.current_step + 1 - len(self._prompt)
        return self._sampler.pick(self._suppressed(to_host(self._model.forward_step(self._state, token))), position)

    def _next_tokens(self, tokens: list[int], skip: int = 0) -> list[int]:
        """Feed ``tokens`` in one call; the next token after each row from row ``skip`` on
        (greedy's, or the sampler's).

        The sampler stops at the first row whose token differs from the next row's input: what
        follows a rejected draft is never used, and each pick costs a vocabulary of noise."""
        if self._sampler is None:
            return self._model.forward_batch_greedy(self._state, tokens, self._suppress)[skip:]
        first = self._state.current_step + 1 - len(self._prompt)
        scores = to_host(self._model.forward_batch(self._state, tokens))
        scores = scores.reshape(-1, scores.shape[-1])
        picks: list[int] = []
        for i in range(skip, len(tokens)):
            picks.append(self._sampler.pick(self._suppressed(scores[i]), first + i))
            if i + 1 < len(tokens) and picks[-1] != tokens[i + 1]:
                break
        return picks

    def _suppressed(self, logits) -> np.ndarray:
        """One row of logits as float32 with the suppressed ids at -inf (a copy)."""
        scores = np.array(logits, dtype=np.float32).reshape(-1)
        scores[self._suppress] = -np.inf
        return scores

    def verify(self, history: Sequence[int], drafts: Sequence[int]) -> tuple[list[int], int | None]:
        """Feed ``history[-1]`` plus ``drafts`` in one call of ``row_floor`` to ``row_ceiling`` rows.

        Returns the drafted tokens greedy would have produced (a prefix of ``drafts``) and the
        model's own next token (None when an accepted draft was EOT). The state is truncated to
        the last accepted token. Invalid draft ids end the draft; rows beyond the position limit
        are dropped, and if too few remain, already emitted tokens are fed again (their rows are
        recomputed bit for bit) so that the call still has ``row_floor`` rows.
        """
        state = self._state
        base = state.current_step
        rows = [history[-1]]
        for d in drafts:
            if not (0 <= d < self._vocab):
                break
            rows.append(int(d))
        rows = rows[: max(1, min(self.row_ceiling, MAX_POSITIONS - base))]
        refeed = min(max(0, self.row_floor - len(rows)), len(history) - 1)
        if refeed:
            state.truncate_to_step(base - refeed)
            preds = self._next_tokens(list(history[-1 - refeed:-1]) + rows, skip=refeed)
        else:
            preds = self._next_tokens(rows)
        accepted: list[int] = []
        eot = self._lm.tokenizer.special.eot
        for i in range(1, len(rows)):
            if preds[i - 1] != rows[i]:
                break
            accepted.append(rows[i])
            if rows[i] == eot:
                state.truncate_to_step(base + len(rows))
                return accepted, None
        state.truncate_to_step(base + 1 + len(accepted))
        return accepted, int(preds[len(accepted)])

    @property
    def current_step(self) -> int:
        return self._state.current_step if self._state is not None else 0

