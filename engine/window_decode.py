"""One window's tokens: the temperature ladder and ``best_of`` (``fallback``), and each attempt
through the fastest way that decodes it exactly: CTranslate2's ``generate`` (beam search, sampling
without the step API, single-row greedy with timestamps) or a ``DecoderSession`` run by the one
decoding loop with the engine's drafters. What a window is decoded from (its prompt, numerics and
policy) is decided before, in ``transcriber``; what its tokens become after, there too."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Protocol

from .backend import LoadedModel, SelfTestResult, _import_ct2
from .decoder import decode_with_drafters, learn_from_window
from .decoding_options import suppressed_ids
from .drafters.base import Drafter, WindowContext
from .drafters.bigram import BigramGuesser, map_then_bigram
from .drafters.chain import DrafterChain
from .fallback import Attempt, compression_ratio, ladder
from .model_limits import MAX_POSITIONS
from .policy import AdaptiveDraftLength, FixedDraftLength
from .sampling import PositionSampler
from .stats import DecodeStats
from .timestamps import SECONDS_PER_TIMESTAMP, TimestampRules
from .transcribe_options import TranscribeOptions


@dataclass
class WindowJob:
    """A window ready to decode (see ``WhisperEngine._prepare_window``)."""

    start: int
    end_frame: int
    numerics: str
    reason: str
    policy: AdaptiveDraftLength | FixedDraftLength
    check: SelfTestResult | None
    encoder_output: object
    language: str | None
    prompt: list[int]
    forced: list[int]
    sot_index: int
    context: WindowContext
    wstats: DecodeStats
    # the policy's expected speedup when the window began (see ``realised_speedup``); None where the
    # draft length is fixed (a draft model's window, ``draft_len``): no estimate in those units
    predicted: float | None = None


class WindowRun(Protocol):
    """What decoding a window reads of the transcription it belongs to."""

    opts: TranscribeOptions
    chain: DrafterChain
    guesser: BigramGuesser
    timestamps: bool
    cpu_free: Callable[[], bool] | None


class WindowDecoder:
    """Decodes the windows of one engine: its model, and the token map whose guesses fill the
    spare rows of batch-invariant calls."""

    def __init__(self, lm: LoadedModel, tokenmap_drafter: Drafter | None) -> None:
        self.lm = lm
        self.tokenizer = lm.tokenizer
        self.tokenmap_drafter = tokenmap_drafter

    def decode_with_fallback(self, run: WindowRun, job: WindowJob, decoder=None) -> Attempt:
        """Decode at each temperature of the ladder until an attempt passes (see ``fallback``);
        at temperatures above 0, ``best_of`` seeded samples and the most probable of them.
        ``decoder``: the window's batch-invariant decoder, where not the model's own choice."""
        opts, thresholds = run.opts, run.opts.thresholds
        forced, context = job.forced, job.context
        eot = self.tokenizer.special.eot
        attempts: list[Attempt] = []
        for number, temperature in enumerate(ladder(opts.temperature)):
            candidates = []
            for k in range(opts.best_of if temperature > 0 else 1):
                sampler = PositionSampler(temperature, opts.seed, context.window_index,
                                          number * opts.best_of + k) if temperature else None
                need_scores = thresholds.need_scores or opts.scores or (temperature > 0 and opts.best_of > 1)
                tokens, used, scores = self.decode(run, job, sampler, need_scores, decoder)
                text = self.tokenizer.decode([t for t in forced + tokens if t < eot]).strip()
                n = len([t for t in forced + tokens if t != eot])  # faster-whisper counts the prefix
                avg = None if scores is None else scores[0] / (n + 1)
                candidates.append(Attempt(forced + tokens, temperature, compression_ratio(text), avg,
                                          None if scores is None else scores[1], used))
            attempt = max(candidates, key=lambda a: a.avg_logprob)  # one candidate: no key is compared
            attempts.append(attempt)
            if not thresholds.failed(attempt):
                return attempt
        return thresholds.best(attempts)

    def decode(self, run: WindowRun, job: WindowJob, sampler: PositionSampler | None = None,
               need_scores: bool = False, decoder=None) -> tuple[list[int], str, tuple[float, float] | None]:
        """The window's tokens after the prompt (EOT included where reached), the numerics they were
        decoded in, and with ``need_scores`` (sum of their log-probabilities, ``<|nospeech|>``
        probability). ``opts.numerics == "auto"``: the policy chose the numerics, so the first-token
        gate may still turn the window single-row, unless the window runs on the invariant decoder,
        whose prefill single-row windows do not share. ``run.cpu_free``: whether nothing else runs
        on the CPU now (see ``DecoderSession``'s ``wide``). ``decoder``: the window's
        batch-invariant decoder, where not the model's own choice."""
        opts, chain, guesser, timestamps, cpu_free = run.opts, run.chain, run.guesser, run.timestamps, run.cpu_free
        encoder_output, prompt, forced, sot_index = job.encoder_output, job.prompt, job.forced, job.sot_index
        numerics, policy, context, wstats, check = job.numerics, job.policy, job.context, job.wstats, job.check
        eot = self.tokenizer.special.eot
        max_new = context.max_new_tokens
        suppress = suppressed_ids(self.tokenizer, self.lm.suppress, opts.suppress_tokens)
        rules = self.rules(opts) if timestamps else None
        generate = opts.generate_only(sampler.temperature if sampler else 0.0) or numerics == "native"
        greedy = (not generate and numerics == "single-row" and (timestamps or need_scores) and sampler is None
                  and not forced)
        if generate or greedy:
            # CT2's own loop applies the same timestamp rules (tested token for token) without
            # copying each step's logits to Python: the fastest single-row greedy, as faster-whisper's.
            # (Without timestamps the fork's 1-row steps cost what its generate does: 12.23 vs 12.18
            # ms a token on 12 read clips, base, Xeon; they keep the prefill timed apart. Where
            # scores are asked for, generate gives them with the tokens, where the steps would need
            # a scoring pass afterwards: a prefill again, ~65 ms a short window.)
            model = self.lm.decoder if self.lm.has_step_api else self.lm.model
            if greedy:
                chain.begin(context)
            else:  # beam search, sampling with penalties, native: nothing drafts, a learning map still learns
                chain.begin_learning(context)
            tokens, scores = generate_window(model, encoder_output, prompt, wstats, sampler, opts, suppress,
                                             max_new, rules)
            if forced and tokens[:len(forced)] == forced:  # CT2 returns the prefix with the new tokens
                tokens = tokens[len(forced):]
            if len(tokens) < max_new:
                tokens.append(eot)
            used = "beam-search" if opts.beam_size > 1 and sampler is None else \
                ("single-row" if numerics != "native" else numerics)
            if greedy:  # drafters replay it in the shadow, so that the policy learns what drafting would give
                learn_from_window(chain, tokens, used, policy, wstats, guesser, eot)
            else:
                chain.end_learning([t for t in tokens if t != eot])
            return tokens, used, scores
        from .verifier import DecoderSession

        chain.begin(context)
        if decoder is None or numerics != "batch-invariant":
            decoder = self.lm.batch_decoder(check) if numerics == "batch-invariant" else self.lm.decoder
        session = DecoderSession(self.lm, encoder_output, prompt, numerics,
                                 row_floor=(check.row_floor if check else None) or 2,
                                 row_ceiling=(check.row_ceiling if check else None) or 17, sampler=sampler,
                                 rules=rules, decoder=decoder, prefix=forced, suppress=suppress,
                                 suppress_blank=opts.suppress_blank, scores_from=sot_index if need_scores else None,
                                 wide=cpu_free if check is not None and check.wide else None)
        tokens = decode_with_drafters(session, chain, policy, max_new, eot, wstats,
                                      map_then_bigram(self.tokenmap_drafter, guesser), opts.numerics == "auto")
        used = session.numerics
        learn_from_window(chain, tokens, used, policy, wstats, guesser, eot)
        scores = None
        if need_scores:
            t0 = time.perf_counter()
            logprobs, no_speech = session.score(tokens, sot_index)
            # As faster-whisper reads CTranslate2's score (normalised by the length with EOT, then
            # multiplied by the length without it), so both paths report the same avg_logprob.
            n = len([t for t in tokens if t != eot])
            scores = (sum(logprobs) * (n / max(1, len(logprobs))) ** opts.length_penalty, no_speech)
            wstats.steps_s += time.perf_counter() - t0
        return tokens, used, scores

    def rules(self, opts: TranscribeOptions) -> TimestampRules:
        index = round(opts.max_initial_timestamp / SECONDS_PER_TIMESTAMP)
        rules = self.timestamp_rules
        return rules if index == rules.max_initial_index else replace(rules, max_initial_index=index)

    @cached_property
    def timestamp_rules(self) -> TimestampRules:
        special = self.tokenizer.special
        return TimestampRules(eot=special.eot, no_timestamps=special.no_timestamps,
                              timestamp_begin=special.timestamp_begin, vocab_size=self.lm.vocab_size)


def generate_window(model, encoder_output, prompt: list[int], wstats: DecodeStats, sampler: PositionSampler | None,
                    opts: TranscribeOptions, suppress: list[int] | None, max_new: int,
                    rules: TimestampRules | None) -> tuple[list[int], tuple[float, float]]:
    """A window through CT2's ``generate``: beam search and penalties (faster-whisper's call), no
    step API, or single-row greedy with timestamps. Returns its tokens and (sum of their
    log-probabilities, ``<|nospeech|>`` probability), read as faster-whisper reads them."""
    t0 = time.perf_counter()
    sampling = {"beam_size": opts.beam_size, "patience": opts.patience}
    if sampler is not None:  # CT2's own sampler: reproducible per process, not per position
        # each attempt and best_of candidate its own draw (attempt 0 keeps the seed it always had)
        _import_ct2().set_random_seed(sampler.seed + sampler.window + 100_003 * sampler.attempt)
        sampling = {"beam_size": 1, "sampling_topk": 0, "sampling_temperature": sampler.temperature}
    max_length = MAX_POSITIONS if opts.max_new_tokens is None else len(prompt) + opts.max_new_tokens
    result = model.generate(encoder_output, [prompt], max_length=max_length,
                            length_penalty=opts.length_penalty, repetition_penalty=opts.repetition_penalty,
                            no_repeat_ngram_size=opts.no_repeat_ngram_size, return_scores=True,
                            return_no_speech_prob=True, suppress_blank=opts.suppress_blank,
                            suppress_tokens=[-1] if suppress is None else suppress,
                            max_initial_timestamp_index=rules.max_initial_index if rules else 50,
                            **sampling)[0]
    wstats.steps_s += time.perf_counter() - t0
    tokens = list(result.sequences_ids[0])
    wstats.tokens += len(tokens)
    wstats.steps += max(0, len(tokens) - 1)
    total = result.scores[0] * len(tokens) ** opts.length_penalty if tokens else 0.0
    return tokens, (total, float(result.no_speech_prob))
