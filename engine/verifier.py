"""The decoder session of one window: prefill, single-row steps, and exact batched verification.

This is the only place that drives the step API. Two numerics:

* ``single-row``: prefill the prompt, then 1-row steps, exactly as the fork's ``generate``
  decodes greedily (its fastest greedy; where the invariant decoder's 1-row step is faster still,
  ``auto`` windows are batch-invariant on it instead).
* ``batch-invariant``: prefill the prompt, then every decoder call carries at least
  ``row_floor`` rows. The self-test shows that from that size on a token's logits are bitwise the
  same whatever the call's size and the token's row, so the emitted tokens cannot depend on what
  was drafted: drafts only decide how many tokens one call confirms. Where the fork's kernels
  have no such floor (CPUs without AVX-512), or where it is faster than they are, the session
  drives the ONNX Runtime invariant decoder instead (``invariant_decoder``: the same step API, floor 1).

With a ``PositionSampler`` the session samples instead (temperature > 0), and with
``TimestampRules`` it forbids malformed timestamps: either way each position's token is a fixed
function of its logits, the tokens before it and the seed, so the same argument holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from .backend import LoadedModel, to_host
from .model_limits import MAX_POSITIONS
from .sampling import PositionSampler
from .timestamps import TimestampRules

Numerics = Literal["single-row", "batch-invariant"]


class DecoderSession:
    """KV-cached decoding of one window; never cloned, rolled back with ``truncate_to_step``."""

    def __init__(self, lm: LoadedModel, encoder_output, prompt: Sequence[int], numerics: Numerics,
                 row_floor: int = 2, row_ceiling: int = 17, sampler: PositionSampler | None = None,
                 rules: TimestampRules | None = None, decoder=None, prefix: Sequence[int] = (),
                 suppress: Sequence[int] | None = None, suppress_blank: bool = True,
                 scores_from: int | None = None, wide: Callable[[], bool] | None = None) -> None:
        """``sampler``: pick tokens by temperature sampling with noise fixed per position (see
        ``sampling``) instead of greedily. ``rules``: decode with timestamps (see ``timestamps``).
        Either needs each row's full logits on the host; exactness is unchanged. ``decoder``: the
        model whose step API the session drives (default: ``lm.decoder_for`` the numerics, i.e. the
        invariant decoder, whose rows are bitwise alike from 1 row, for batch-invariant windows
        where the self-test chose it). ``prefix``: the prompt's last tokens, forced text the window
        continues (faster-whisper's ``prefix``): the timestamp rules count them as emitted.
        ``suppress``: the ids never emitted (default: the model's); ``suppress_blank``: no blank
        or EOT as the first token. ``scores_from``: the prompt index of SOT where ``score`` will be
        asked for: a decoder that brings every row's logits to the host anyway (the invariant
        decoder) then records each emitted token's log-probability as it decodes, and reads
        ``<|nospeech|>`` from its prefill, instead of a scoring pass afterwards. ``wide``: asked
        before each call whether the CPU is free (the invariant decoder's call then runs on all its
        threads; only where the self-test found its rows the same bits on either)."""
        self._lm = lm
        self._sampler = sampler
        self._rules = rules
        self._prefix = [int(t) for t in prefix]
        if decoder is None:
            decoder = lm.decoder_for(numerics, int(encoder_output.shape[1]))
        self._model = decoder
        self._sot_index = scores_from if hasattr(decoder, "prefill_rows") else None
        self._wide = wide if hasattr(decoder, "prefill_rows") else None
        self._logprobs: dict[int, float] = {}  # window position -> log-probability of its pick
        self._no_speech: float | None = None
        # the prefix matters to the rules only
        self._full_logits = sampler is not None or rules is not None or self._sot_index is not None
        # Only the fork's decoder prefills alike for both numerics: a window begun on the invariant
        # decoder cannot turn single-row after its prefill.
        self.can_go_single_row = decoder is lm.decoder
        self._encoder_output = encoder_output
        self._prompt = list(prompt)
        self.numerics = numerics
        self.row_floor = max(1, int(row_floor))
        self.row_ceiling = max(self.row_floor, int(row_ceiling))
        self._suppress = list(lm.suppress if suppress is None else suppress)
        self._suppress_begin = lm.suppress_begin if suppress_blank else []
        self._vocab = lm.vocab_size
        self._state = None

    def start(self) -> int:
        """Prefill the whole prompt in one call and return the first token (blank and EOT suppressed).

        The fork's ``generate`` starts the same way (its first token comes from the multi-row prompt
        call, then 1-row steps follow): on 40 of 40 read-speech clips this matched it, while feeding
        the prompt's last token as a 1-row step differed on 2 near-ties.
        """
        if self._sot_index is None and self._wide is None:
            self._state, logits = self._model.prefill(self._encoder_output, self._prompt)
            return self._pick(logits, 0, [], begin=True)
        rows = ([] if self._sot_index is None else [self._sot_index]) + [len(self._prompt) - 1]
        self._state, logits = self._model.prefill_rows(self._encoder_output, self._prompt, rows, wide=self._wide)
        if self._sot_index is not None:
            self._no_speech = self._no_speech_prob(to_host(logits)[0])
        return self._pick(logits[-1], 0, [], begin=True)

    def step(self, history: Sequence[int]) -> int:
        """Feed ``history[-1]`` (the window's tokens so far) in a 1-row call; return the next token."""
        if not self._full_logits:
            return int(self._model.forward_step_greedy(self._state, history[-1], self._suppress))
        position = self._state.current_step + 1 - len(self._prompt)
        return self._pick(self._model.forward_step(self._state, history[-1]), position, history)

    def _next_tokens(self, tokens: list[int], emitted_before: Sequence[int], skip: int = 0) -> list[int]:
        """Feed ``tokens`` in one call; the next token after each row from row ``skip`` on.

        ``emitted_before``: the window's tokens before ``tokens[0]`` (what the timestamp rules of
        a row look at). With full logits the picks stop at the first row whose token differs from
        the next row's input: what follows a rejected draft is never used."""
        if not self._full_logits:
            return self._model.forward_batch_greedy(self._state, tokens, self._suppress)[skip:]
        first = self._state.current_step + 1 - len(self._prompt)
        scores = to_host(self._model.forward_batch(self._state, tokens))
        scores = scores.reshape(-1, scores.shape[-1])
        before = list(emitted_before)
        picks: list[int] = []
        for i in range(skip, len(tokens)):
            picks.append(self._pick(scores[i], first + i, before + tokens[:i + 1]))
            if i + 1 < len(tokens) and picks[-1] != tokens[i + 1]:
                break
        return picks

    def _pick(self, logits, position: int, emitted: Sequence[int], begin: bool = False) -> int:
        """The token of one row: greedy's or the sampler's choice among what the rules allow."""
        scores = self._allowed(logits, emitted, begin)
        token = int(scores.argmax()) if self._sampler is None else self._sampler.pick(scores, position)
        if self._sot_index is not None:
            self._logprobs[position] = _token_logprob(scores, token)
        return token

    def _allowed(self, logits, emitted: Sequence[int], begin: bool) -> np.ndarray:
        """One row's logits with what may not follow ``emitted`` at -inf: suppressed ids, blanks
        first, and the timestamp rules (which see the forced prefix as emitted too)."""
        scores = self._suppressed(to_host(logits))
        if begin:
            scores[self._suppress_begin] = -np.inf
        if self._rules is not None:
            self._rules.apply(self._prefix + list(emitted), scores)
        return scores

    def score(self, tokens: Sequence[int], sot_index: int) -> tuple[list[float], float]:
        """Log-probabilities of a finished window's ``tokens`` (EOT included where emitted) under
        the same rules as decoding, and the probability of ``<|nospeech|>`` after SOT.

        Computed afterwards from the tokens alone, in calls of at most ``row_ceiling`` rows on
        the window's own state (rolled back to SOT, so the encoder's keys are not computed again;
        the invariant decoder prefills the prompt again, in the call decoding made): a fixed
        function of the tokens, hence the same with any drafter (faster-whisper's
        ``avg_logprob`` and ``no_speech_prob``, which decide its fallback and silence skips).
        Where they were recorded while decoding (``scores_from``), those are returned: on the
        invariant decoder a row's logits are the same bits in any call, so they are equal."""
        if self._no_speech is not None and all(i in self._logprobs for i in range(len(tokens))):
            return [self._logprobs[i] for i in range(len(tokens))], self._no_speech
        if hasattr(self._model, "prefill_rows"):
            # The prompt's rows from its own call again (the invariant decoder's window graph
            # computes them otherwise than its steps would), then the window's tokens.
            state, logits = self._model.prefill_rows(self._encoder_output, self._prompt,
                                                     list(range(sot_index, len(self._prompt))))
            rows, inputs = [np.asarray(to_host(logits), dtype=np.float32).reshape(-1, self._vocab)], list(tokens[:-1])
        else:
            state, rows, start = self._state, [], sot_index
            if sot_index == 0:
                # The fork's state keeps its first position: SOT's own row comes from a prefill of it.
                _, logits = self._model.prefill(self._encoder_output, self._prompt[:1])
                rows.append(np.asarray(to_host(logits), dtype=np.float32).reshape(-1, self._vocab))
                start = 1
            state.truncate_to_step(start)
            inputs = self._prompt[start:] + list(tokens[:-1])
        for begin in range(0, len(inputs), self.row_ceiling):
            logits = to_host(self._model.forward_batch(state, inputs[begin:begin + self.row_ceiling]))
            rows.append(np.asarray(logits, dtype=np.float32).reshape(-1, self._vocab))
        scores = np.concatenate(rows)
        first = len(self._prompt) - 1 - sot_index
        logprobs = [_token_logprob(self._allowed(scores[first + i], tokens[:i], begin=i == 0), token)
                    for i, token in enumerate(tokens)]
        return logprobs, self._no_speech_prob(scores[0])

    def _no_speech_prob(self, sot_row: np.ndarray) -> float:
        no_speech_id = self._lm.tokenizer.special.no_speech
        return float(np.exp(_token_logprob(sot_row, no_speech_id))) if no_speech_id is not None else 0.0

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
            preds = self._next_tokens(list(history[-1 - refeed:-1]) + rows, history[:-1 - refeed], skip=refeed)
        else:
            preds = self._next_tokens(rows, history[:-1])
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



def _token_logprob(row: np.ndarray, token: int) -> float:
    """log softmax(row)[token] in float64 (the same operations wherever a row is scored, so
    recorded and recomputed scores agree bit for bit)."""
    row = np.asarray(row, dtype=np.float64).reshape(-1)
    top = row.max()
    return float(row[token] - top - np.log(np.exp(row - top).sum()))
