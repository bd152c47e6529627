"""Decoding statistics: one small record per window, summed per transcription."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class DecodeStats:
    """Counts and times of the decoder phase.

    ``drafted``/``accepted`` count draft tokens (drafter proposals and filler guesses) fed to
    verify calls and how many of them greedy confirmed; ``steps`` counts 1-row decoder calls;
    ``accepted_by_len[n]`` counts verify calls that accepted n draft tokens. ``shadow_*`` are the
    acceptance a drafter would have had while decoding single-row (no decoder cost).
    """

    drafted: int = 0
    accepted: int = 0
    filler_drafted: int = 0
    filler_accepted: int = 0
    verify_calls: int = 0
    steps: int = 0
    tokens: int = 0
    k_sum: int = 0
    prefill_s: float = 0.0
    steps_s: float = 0.0
    shadow_drafted: int = 0
    shadow_accepted: int = 0
    shadow_rounds: int = 0
    accepted_by_len: dict[int, int] = field(default_factory=dict)
    calls_by_rows: dict[int, int] = field(default_factory=dict)
    by_drafter: dict[str, dict[str, int]] = field(default_factory=dict)

    def record_verify(self, k: int, n_drafted: int, n_accepted: int, n_filler: int, source: str,
                      rows: int = 0) -> None:
        self.verify_calls += 1
        rows = rows or n_drafted + 1
        self.calls_by_rows[rows] = self.calls_by_rows.get(rows, 0) + 1
        self.k_sum += k
        self.drafted += n_drafted
        self.accepted += n_accepted
        n_real = n_drafted - n_filler
        real_acc = min(n_accepted, n_real)
        self.filler_drafted += n_filler
        self.filler_accepted += n_accepted - real_acc
        self.accepted_by_len[n_accepted] = self.accepted_by_len.get(n_accepted, 0) + 1
        per = self.by_drafter.setdefault(source, {"drafted": 0, "accepted": 0, "rounds": 0})
        per["drafted"] += n_real
        per["accepted"] += real_acc
        per["rounds"] += 1

    def merge(self, other: DecodeStats) -> None:
        for name in ("drafted", "accepted", "filler_drafted", "filler_accepted", "verify_calls", "steps", "tokens",
                     "k_sum", "prefill_s", "steps_s", "shadow_drafted", "shadow_accepted", "shadow_rounds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for n, c in other.accepted_by_len.items():
            self.accepted_by_len[n] = self.accepted_by_len.get(n, 0) + c
        for n, c in other.calls_by_rows.items():
            self.calls_by_rows[n] = self.calls_by_rows.get(n, 0) + c
        for src, d in other.by_drafter.items():
            mine = self.by_drafter.setdefault(src, {"drafted": 0, "accepted": 0, "rounds": 0})
            for key, value in d.items():
                mine[key] += value

    @property
    def acceptance_rate(self) -> float:
        """Ar: accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_len(self) -> float:
        """Al: accepted draft tokens per verify call."""
        return self.accepted / self.verify_calls if self.verify_calls else 0.0

    @property
    def decoder_calls(self) -> int:
        return self.verify_calls + self.steps

    def to_dict(self) -> dict:
        d = asdict(self)
        d["accepted_by_len"] = {str(k): v for k, v in sorted(self.accepted_by_len.items())}
        d["calls_by_rows"] = {str(k): v for k, v in sorted(self.calls_by_rows.items())}
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["mean_accepted_len"] = round(self.mean_accepted_len, 4)
        d["mean_k"] = round(self.k_sum / self.verify_calls, 3) if self.verify_calls else 0.0
        d["decoder_calls"] = self.decoder_calls
        d["tokens_per_call"] = round(self.tokens / self.decoder_calls, 4) if self.decoder_calls else 0.0
        d["shadow_acceptance_rate"] = (round(self.shadow_accepted / self.shadow_drafted, 4)
                                       if self.shadow_drafted else 0.0)
        return d
