"""A stand-in for the decoder session when the tokens greedy emits are already known.

Speculation never changes the tokens, so drafting can be studied without the model: the engine's
own loop (``decode_window``) runs against this oracle, which accepts a draft exactly where greedy
would. Used by ``draft_replay`` (recorded model tokens) and ``tokenmap_sim`` (reference text).
"""

from __future__ import annotations

from collections.abc import Sequence

from specwhisper.policy import VerifyCost
from specwhisper.stats import DecodeStats


class OracleSession:
    """Stands in for ``DecoderSession``: the tokens are known, so verifying is comparing."""

    def __init__(self, tokens: Sequence[int], eot: int, numerics: str, row_floor: int, row_ceiling: int,
                 can_go_single_row: bool = True) -> None:
        self._tokens = [*tokens, eot]
        self.numerics = numerics
        self.can_go_single_row = can_go_single_row
        self.row_floor = row_floor
        self.row_ceiling = row_ceiling

    def start(self) -> int:
        return self._tokens[0]

    def step(self, history: Sequence[int]) -> int:
        return self._tokens[len(history)]

    def verify(self, history: Sequence[int], drafts: Sequence[int]) -> tuple[list[int], int | None]:
        i, accepted = len(history), []
        for d in list(drafts)[:self.row_ceiling - 1]:
            if i >= len(self._tokens) or d != self._tokens[i]:
                break
            accepted.append(d)
            i += 1
            if d == self._tokens[-1]:  # an accepted EOT ends the window
                return accepted, None
        return accepted, self._tokens[i] if i < len(self._tokens) else None


def priced_calls(stats: DecodeStats, cost: VerifyCost, row_floor: int) -> float:
    """The verify calls of ``stats`` in single-row steps (a call carries at least ``row_floor`` rows)."""
    return sum(cost(max(rows, row_floor)) * n for rows, n in stats.calls_by_rows.items())
