"""Call patterns of the batch-invariance self-test and how their logits are compared: a token's
logits must be the same bits whatever the size of the call that computed them and its row there."""

from __future__ import annotations

import numpy as np

FLOORS = (2, 3, 4)
CEILINGS = (17, 12, 8)  # a verify call carries at most K + 1 = 17 rows


ROWS_AT_ONCE = 16  # rows of logits compared at a time (a whole run's, 444 x 51865, took 0.5 GB in float64)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b|, where equal entries (equal infinities included: CUDA logits hold -inf)
    count 0 and a NaN counts as infinitely far. Compared a few rows at a time: the first load's
    self-test peaked at 2 GB, and a box with 2 GB could not finish it."""
    a2, b2 = np.atleast_2d(a), np.atleast_2d(b)
    worst = 0.0
    for i in range(0, a2.shape[0], ROWS_AT_ONCE):
        x, y = a2[i:i + ROWS_AT_ONCE], b2[i:i + ROWS_AT_ONCE]
        with np.errstate(invalid="ignore"):
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        d[x == y] = 0.0
        if d.size:
            worst = max(worst, float(np.where(np.isnan(d), np.inf, d).max()))
    return worst


def even_calls(n: int, size: int) -> list[int]:
    """n rows in calls of ``size`` rows (a remainder joins the last call)."""
    chunks = [size] * (n // size)
    if n % size:
        if chunks:
            chunks[-1] += n % size
        else:
            chunks = [n]
    return chunks


def swept_rows(run, n: int, low: int, high: int, lead: int, last_position: int) -> dict[str, float]:
    """Every position of ``run``'s sequence decoded in calls of ``low`` rows (the oracle's calls:
    one token and its padding rows), then cycling through ``low``..``high`` rows (ascending, then
    descending: each size lands at many positions and offsets), compared with calls of ``high``
    rows (the fewest calls; equal bits are transitive): the largest difference of each pattern,
    up to the first that differs (one is enough to fail).

    A row is computed over the keys of its whole call, so its bits may depend on where the call
    ends: on an H200 (tiny.en int8_float16, 330 tokens of previous text) rows past position ~410
    differed by 0.77 between calls of 3 and of 12 or 17 rows, while the two cycles, whose small
    calls all fell on early positions, matched the 17-row calls. The floor-size pattern puts the
    smallest calls at every position."""
    reference = run(cycled_calls(n, [high], low))
    diffs: dict[str, float] = {}
    for label, sizes in (("in calls of", [low]), ("up", list(range(low, high + 1))),
                         ("down", list(range(high, low - 1, -1)))):
        d = max_abs_diff(run(cycled_calls(n, sizes, low)), reference)
        span = f"{low} vs {high} rows" if len(sizes) == 1 else f"{low}..{high}"
        diffs[f"after {lead} prompt tokens to position {last_position}, {label} {span}"] = d
        if d != 0.0:
            break
    return diffs


def cycled_calls(n: int, sizes: list[int], low: int) -> list[int]:
    """n rows in calls of ``sizes`` in turn, none under ``low`` rows nor over the largest size."""
    chunks, left = [], n
    while left > 0:
        c = min(left, sizes[len(chunks) % len(sizes)])
        if 0 < left - c < low:  # the rest would be a call below the floor: leave it ``low`` rows
            c = left - low if left - low >= low else left
        chunks.append(c)
        left -= c
    return chunks


def invariant_rows(run, n: int, floors: tuple[int, ...] = FLOORS) -> tuple[int | None, int | None, dict]:
    """The smallest floor and largest ceiling such that every call of floor..ceiling rows gives
    bitwise the same logits for a token, wherever it sits in the call.

    Each candidate floor is first checked against calls one row larger (cheap, and it rules out
    a floor whose neighbours already differ); then calls of up to 17, 12 or 8 rows are placed at
    two different offsets and compared with the floor-sized reference.
    """
    diffs: dict[str, float] = {}
    for floor in floors:
        reference = run(even_calls(n, floor))

        def same(chunks: list[int], reference=reference, floor=floor) -> bool:
            d = max_abs_diff(run(chunks), reference)
            diffs[f"{floor}:{','.join(map(str, chunks))}"] = d
            return d == 0.0

        if not same(even_calls(n, floor + 1)):
            continue
        for ceiling in CEILINGS:
            if ceiling <= floor + 1:
                break
            if same([ceiling] + even_calls(n - ceiling, floor)) and same([floor, ceiling] + even_calls(n - floor - ceiling, floor)):
                return floor, ceiling, diffs
        return floor, floor + 1, diffs
    return None, None, diffs
