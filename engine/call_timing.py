"""How long decoder calls of 1..17 rows take, as the decoding loop pays them: what the cost curve
(``VerifyCost``) and the choices between decoders and thread counts are made of."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingInput:
    """What timed calls decode: an encoder output of the real shape (random values: a call's time
    does not depend on them), its prompt, text tokens to feed, and the ids the greedy calls suppress."""

    encoder_output: object
    prompt: list[int]
    text: list[int]
    suppress: list[int]


class _CallRuns:
    """One model's decoder state, prefilled once and moved past the prompt, from which runs of
    ``run_len`` calls are timed: each call advances the state by one token and the rest is rolled
    back with ``truncate_to_step`` (cache growth and truncation count, as the loop pays them); every
    run starts from the same position. Prefilling once per model, not once per run, saved about
    1.5 s of a first load's measurements (a full window's cross-attention, 0.14 s on base)."""

    def __init__(self, model, inputs: TimingInput, sizes: tuple[int, ...], run_len: int) -> None:
        need = run_len + max(sizes, default=1)
        self.model, self.run_len, self.suppress = model, run_len, inputs.suppress
        self.text = (inputs.text * (1 + need // len(inputs.text)))[:need]
        self.state, _ = model.prefill(inputs.encoder_output, inputs.prompt)
        for token in self.text[:4]:  # warm up and move past the prompt
            model.forward_step_greedy(self.state, token, self.suppress)
        self.base = self.state.current_step

    def seconds(self, n: int, run_len: int | None = None) -> float:
        """One run of ``run_len`` calls of ``n`` rows."""
        model, state, text, base = self.model, self.state, self.text, self.base
        state.truncate_to_step(base)
        t0 = time.perf_counter()
        for i in range(run_len or self.run_len):
            if n == 1:
                model.forward_step_greedy(state, text[i], self.suppress)
            else:
                model.forward_batch_greedy(state, text[i:i + n], self.suppress)
                state.truncate_to_step(base + i + 1)
        elapsed = time.perf_counter() - t0
        state.truncate_to_step(base)
        return elapsed


def call_seconds(model, inputs: TimingInput, sizes: tuple[int, ...], trials: int = 3,
                 run_len: int = 12) -> dict[int, float]:
    """Fastest time of a run of ``run_len`` decoder calls per row count (1 included), as the loop
    pays it (see ``_CallRuns``). Sizes are timed in turn within each trial, so a burst of load from
    elsewhere hits them alike; noise only adds time, so the fastest trial counts.
    """
    runs = _CallRuns(model, inputs, sizes, run_len)
    best = dict.fromkeys((1, *sizes), float("inf"))
    for _ in range(trials):
        for n in best:
            best[n] = min(best[n], runs.seconds(n))
    return best


def interleaved_call_seconds(models: Sequence, inputs: TimingInput, sizes: tuple[int, ...],
                             rounds: int = 5, unit_only: tuple[bool, ...] = ()) -> list[dict[int, float]]:
    """``call_seconds`` for several model instances, timed in turn over ``rounds`` rounds after a
    warm-up, fastest per size: load from elsewhere and a cold start hit them alike. A model whose
    ``unit_only`` entry is true is timed in 1-row steps only (a unit the others are priced in)."""
    own = [(1,) if i < len(unit_only) and unit_only[i] else (1, *sizes) for i in range(len(models))]
    runs = [_CallRuns(model, inputs, s, run_len=12) for model, s in zip(models, own)]
    for r, s in zip(runs, own):  # the warm-up: each size once, in short runs
        for n in s:
            r.seconds(n, run_len=4)
    best = [dict.fromkeys(s, float("inf")) for s in own]
    for _ in range(rounds):
        for r, s, b in zip(runs, own, best):
            for n in s:
                b[n] = min(b[n], r.seconds(n))
    return best


def monotone_costs(seconds: dict[int, float], unit: float, at_least: float = 0.0) -> dict[int, float]:
    """Call times by rows in units of ``unit`` seconds, each at least ``at_least``, a size never
    counted dearer than a larger one (noise only adds time)."""
    table, ceiling = {}, float("inf")
    for n in sorted(seconds, reverse=True):
        ceiling = min(ceiling, max(seconds[n] / unit, at_least))
        table[n] = round(ceiling, 3)
    return dict(sorted(table.items()))
