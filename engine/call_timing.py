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


def call_seconds(model, inputs: TimingInput, sizes: tuple[int, ...], trials: int = 3,
                 run_len: int = 12) -> dict[int, float]:
    """Fastest time of a run of ``run_len`` decoder calls per row count (1 included), as the loop pays it.

    Each call advances the state by one token and the rest is rolled back with
    ``truncate_to_step`` (cache growth and truncation count). Sizes are timed in turn within each
    trial, so a burst of load from elsewhere hits them alike; noise only adds time, so the fastest
    trial counts.
    """
    need = run_len + max(sizes, default=1)
    text = (inputs.text * (1 + need // len(inputs.text)))[:need]
    suppress = inputs.suppress
    state, _ = model.prefill(inputs.encoder_output, inputs.prompt)
    for token in text[:4]:  # warm up and move past the prompt
        model.forward_step_greedy(state, token, suppress)
    base = state.current_step

    def run(n: int) -> float:
        state.truncate_to_step(base)
        t0 = time.perf_counter()
        for i in range(run_len):
            if n == 1:
                model.forward_step_greedy(state, text[i], suppress)
            else:
                model.forward_batch_greedy(state, text[i:i + n], suppress)
                state.truncate_to_step(base + i + 1)
        return time.perf_counter() - t0

    best = dict.fromkeys((1, *sizes), float("inf"))
    for _ in range(trials):
        for n in best:
            best[n] = min(best[n], run(n))
    state.truncate_to_step(base)
    return best


def interleaved_call_seconds(models: Sequence, inputs: TimingInput, sizes: tuple[int, ...],
                             rounds: int = 5, unit_only: tuple[bool, ...] = ()) -> list[dict[int, float]]:
    """``call_seconds`` for several model instances, timed in turn over ``rounds`` rounds after a
    warm-up, fastest per size: load from elsewhere and a cold start hit them alike. A model whose
    ``unit_only`` entry is true is timed in 1-row steps only (a unit the others are priced in)."""
    own = [() if i < len(unit_only) and unit_only[i] else sizes for i in range(len(models))]
    for model, s in zip(models, own):
        call_seconds(model, inputs, s, trials=1, run_len=4)
    best = [dict.fromkeys((1, *s), float("inf")) for s in own]
    for _ in range(rounds):
        for model, s, b in zip(models, own, best):
            for n, t in call_seconds(model, inputs, s, trials=1).items():
                b[n] = min(b[n], t)
    return best


def monotone_costs(seconds: dict[int, float], unit: float, at_least: float = 0.0) -> dict[int, float]:
    """Call times by rows in units of ``unit`` seconds, each at least ``at_least``, a size never
    counted dearer than a larger one (noise only adds time)."""
    table, ceiling = {}, float("inf")
    for n in sorted(seconds, reverse=True):
        ceiling = min(ceiling, max(seconds[n] / unit, at_least))
        table[n] = round(ceiling, 3)
    return dict(sorted(table.items()))
