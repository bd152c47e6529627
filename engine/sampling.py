"""Temperature sampling that speculation cannot change: Gumbel-max with noise fixed per position.

Sampling token t at temperature T is the same as taking ``argmax(logits / T + g)`` where ``g``
holds independent standard Gumbel variables (the Gumbel-max trick). If ``g`` is drawn from a
generator keyed by (seed, window, position) instead of a running stream, the token at each
position is a fixed function of that position's logits: "greedy over perturbed logits". The
verifier then checks drafts exactly as it does for greedy, so with a fixed numerics and seed the
tokens are identical with any drafter and any K, and without speculation.

For a drafter that proposes one token x (all ours do), this coupling accepts x with probability
p(x) and otherwise emits a token distributed as p without x, renormalised: exactly what
speculative rejection sampling does with a point-mass draft. The output distribution is
sampling's at temperature T, run after run; a given seed just picks one sample reproducibly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TEMPERATURE = 10.0


@dataclass(frozen=True)
class PositionSampler:
    """Picks the token at one output position of one window from its (suppressed) logits."""

    temperature: float
    seed: int
    window: int = 0
    attempt: int = 0  # the temperature fallback's retry of a window draws fresh noise

    def noise(self, position: int, size: int) -> np.ndarray:
        """Standard Gumbel noise for ``position``: the same array every time it is asked for."""
        key = [self.seed, self.window, position] + ([self.attempt] if self.attempt else [])
        u = np.random.default_rng(key).random(size)
        with np.errstate(divide="ignore"):
            return -np.log(-np.log(u))  # u == 0 gives -inf: that token is never picked

    def pick(self, scores: np.ndarray, position: int) -> int:
        """The sampled token for ``position``; ``scores`` are logits with suppressed ids at -inf."""
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        return int(np.argmax(scores / self.temperature + self.noise(position, scores.size)))
