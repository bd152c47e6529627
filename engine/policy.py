"""Cost model and policy: how many tokens to draft, and which numerics a window should use.

A verify call of n rows costs ``c(n)`` single-row steps (measured on this project's 2-core
CPU, base int8, decoder on 1 thread: about 1.0 for 2 rows, 1.15 for 3, 1.2 for 4, 1.5 for 8, 2.1
for 17; on 2 threads the same calls cost 1.7-2.0: see ``LoadedModel._choose_decoder_threads``. The
engine measures its own curve once per model, compute type, device and thread count). With per-position acceptance a_i (the chance that draft
token i is right given the ones before it were), one call yields
``E(K) = 1 + sum_i prod_{j<=i} a_j`` tokens, so speculation pays when
``max_K E(K) / c(max(K + 1, floor)) > 1``. Data in, a number out: no decoder state here.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Measured on this project's 2-core CPU machines, base int8, decoder on 1 thread (LoadedModel.call_costs);
# used only until the engine has measured its own curve.
DEFAULT_CPU_COST = {1: 1.0, 2: 1.0, 3: 1.15, 4: 1.21, 6: 1.4, 8: 1.5, 12: 1.78, 16: 2.0, 17: 2.08}
DEFAULT_CUDA_COST = {1: 1.0, 2: 1.05, 4: 1.08, 8: 1.12, 16: 1.2, 17: 1.21}


@dataclass(frozen=True)
class VerifyCost:
    """Relative cost of a decoder call by its row count (1 row = 1.0)."""

    by_rows: dict[int, float]

    def __call__(self, rows: int) -> float:
        keys = sorted(self.by_rows)
        if rows <= keys[0]:
            return self.by_rows[keys[0]]
        for lo, hi in zip(keys, keys[1:]):
            if lo <= rows <= hi:
                w = (rows - lo) / (hi - lo)
                return self.by_rows[lo] * (1 - w) + self.by_rows[hi] * w
        return self.by_rows[keys[-1]]

    @classmethod
    def default(cls, device: str = "cpu") -> VerifyCost:
        return cls(dict(DEFAULT_CUDA_COST if device == "cuda" else DEFAULT_CPU_COST))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> VerifyCost:
        """Load a curve written by ``python -m benchmarks verify-cost`` (step_ms and batch_ms by rows)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        step = float(data["step_ms"])
        table = {1: 1.0}
        table.update({int(n): float(ms) / step for n, ms in data["batch_ms"].items() if int(n) >= 2})
        return cls(table)


def expected_tokens(accept: list[float], k: int) -> float:
    """Tokens one verify call yields with k drafts and per-position acceptance ``accept``."""
    total, p = 1.0, 1.0
    for i in range(k):
        p *= accept[i] if i < len(accept) else accept[-1]
        total += p
    return total


@dataclass
class FixedDraftLength:
    """K pinned by the user (``--draft-len``); speculation is assumed to pay."""

    k: int

    def draft_len(self) -> int:
        return self.k

    def record(self, n_proposed: int, n_accepted: int, filler_accepted: int = 0) -> None:
        pass

    def expected_speedup(self) -> float:
        return float("inf") if self.k > 0 else 0.0


@dataclass
class StepHeuristicDraftLength:
    """The published +2/-1 rule (K grows by 2 after a fully accepted draft, shrinks by 1 after a
    rejection), kept as a baseline for the cost model."""

    k: int = 4
    k_min: int = 1
    k_max: int = 16

    def draft_len(self) -> int:
        return self.k

    def record(self, n_proposed: int, n_accepted: int, filler_accepted: int = 0) -> None:
        if n_proposed <= 0:
            return
        self.k = min(self.k_max, self.k + 2) if n_accepted >= n_proposed else max(self.k_min, self.k - 1)

    def expected_speedup(self) -> float:
        return float("inf")


@dataclass
class ConfidenceCalibration:
    """What a drafter's confidence in a token is worth: the acceptance measured for drafts it rated alike.

    A token map's n-gram confidence is right about commands said before (0.99, and 95 % accepted)
    but too high on commands never heard; binned by confidence, each bin learns how often its
    drafts were accepted (given the drafts before them were), starting from the confidence itself.
    """

    edges: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
    prior_weight: float = 2.0
    decay: float = 0.99
    _tried: list[float] = field(default_factory=list)
    _hit: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        bounds = (0.0, *self.edges, 1.0)
        self._tried = [self.prior_weight] * (len(bounds) - 1)
        self._hit = [self.prior_weight * (lo + hi) / 2 for lo, hi in zip(bounds, bounds[1:])]

    def _bin(self, confidence: float) -> int:
        return bisect.bisect_right(self.edges, confidence)

    def __call__(self, confidence: float) -> float:
        b = self._bin(confidence)
        return self._hit[b] / self._tried[b]

    def record(self, confidence: Sequence[float], n_accepted: int) -> None:
        """A round's drafts as rated, of which the first ``n_accepted`` were accepted."""
        _count_tried(self._tried, self._hit, [self._bin(c) for c in confidence], n_accepted, self.decay)


def _count_tried(tried: list[float], hit: list[float], slots: Sequence[int], n_accepted: int, decay: float) -> None:
    """Decayed counts of a round's drafts: draft i (counted in ``slots[i]``) was tried iff all
    before it were accepted, and hit iff it was accepted too."""
    for i, slot in enumerate(slots):
        if i > n_accepted:
            break
        tried[slot] = tried[slot] * decay + 1.0
        hit[slot] = hit[slot] * decay + (1.0 if i < n_accepted else 0.0)


@dataclass
class AdaptiveDraftLength:
    """Chooses K each round from recent acceptance by position (exponentially weighted).

    Rounds where no drafter proposes anything still cost a full call of ``row_floor`` rows (for
    about one token plus lucky filler guesses), so the estimate weighs them by how often they
    happen (``coverage``): the expected speedup at draft length K is
    ``(cov E(K) + (1 - cov) E_fill) / (cov c(K + 1) + (1 - cov) c(floor))``; it chooses K.

    That estimate assumes every round drafts K tokens with the acceptance of the rounds that
    drafted that far, but a confident drafter stops early where it is unsure: on held-out
    smarthome commands (AMD EPYC, 2-row calls at 1.44 steps) it promised 1.2-1.6x while the rounds
    delivered 1.02x. So whether a window should speculate at all (:meth:`expected_speedup`)
    is judged by what recent rounds delivered, tokens over priced calls (speculated rounds and
    single-row windows replayed in the shadow alike), starting from the prior's estimate.
    """

    cost: VerifyCost
    row_floor: int = 3
    k_max: int = 16
    decay: float = 0.95
    prior: float = 0.5
    prior_coverage: float = 0.5
    prior_weight: float = 2.0
    round_decay: float = 0.98  # rounds remembered for the window decision (about 50: several windows)
    prior_cost_weight: float = 8.0  # the prior estimate counts as this many steps of evidence
    _tried: list[float] = field(default_factory=list)
    _hit: list[float] = field(default_factory=list)
    _rounds: float = 0.0
    _proposed: float = 0.0
    _empty: float = 0.0
    _filler_hits: float = 0.0
    _k: int = 0
    _speedup: float = 0.0
    _cost_cache: list[float] = field(default_factory=list)
    _delivered_tokens: float = 0.0
    _delivered_cost: float = 0.0
    calibration: ConfidenceCalibration = field(default_factory=ConfidenceCalibration)
    # the round being verified, where ``confident_length`` chose it: its K and its drafts as rated
    _confident_round: tuple[int, list[float]] | None = None

    def __post_init__(self) -> None:
        self._tried = [self.prior_weight] * self.k_max
        self._hit = [self.prior * self.prior_weight] * self.k_max
        self._rounds = self.prior_weight
        self._proposed = self.prior_coverage * self.prior_weight
        self._update()
        self._delivered_cost = self.prior_cost_weight
        self._delivered_tokens = self._speedup * self.prior_cost_weight

    def acceptance(self) -> list[float]:
        return [h / t for h, t in zip(self._hit, self._tried)]

    @property
    def coverage(self) -> float:
        return self._proposed / self._rounds

    def draft_len(self) -> int:
        return self._k

    def record(self, n_proposed: int, n_accepted: int, filler_accepted: int = 0) -> None:
        r = self.round_decay
        self._delivered_tokens = self._delivered_tokens * r + 1.0 + n_accepted + filler_accepted
        self._delivered_cost = self._delivered_cost * r + self.cost(max(n_proposed + 1, self.row_floor))
        d = self.decay
        self._rounds = self._rounds * d + 1.0
        self._proposed = self._proposed * d + (1.0 if n_proposed > 0 else 0.0)
        if n_proposed <= 0:
            self._empty = self._empty * d + 1.0
            self._filler_hits = self._filler_hits * d + filler_accepted
        # positions past the K of a round the drafter's confidence widened (``confident_length``)
        # were drafted because it was sure of them: they would teach K the acceptance of sure
        # rounds only, so they are left out
        learned = min(n_proposed, self.k_max)
        if self._confident_round is not None:
            k, rated = self._confident_round
            self._confident_round = None
            learned = min(learned, k) if len(rated) > k else learned
            self.calibration.record(rated[:n_proposed], n_accepted)
        _count_tried(self._tried, self._hit, range(learned), n_accepted, d)
        self._update()

    def _update(self) -> None:
        cov = self.coverage
        e_fill = 1.0 + (self._filler_hits / self._empty if self._empty else 0.0)
        costs = self._costs()
        best_k, best, tokens_k, p = 1, 0.0, 1.0, 1.0
        for k in range(1, self.k_max + 1):  # one pass: E(k) grows by the chance that draft k is reached and right
            p *= self._hit[k - 1] / self._tried[k - 1]
            tokens_k += p
            gain = (cov * tokens_k + (1 - cov) * e_fill) / (cov * costs[k] + (1 - cov) * costs[0])
            if gain > best + 1e-9:
                best_k, best = k, gain
        self._k, self._speedup = best_k, best

    def _costs(self) -> list[float]:
        """[c(floor), c(max(2, floor)), ..., c(max(k_max + 1, floor))], computed once."""
        if len(self._cost_cache) != self.k_max + 1:
            self._cost_cache = [self.cost(self.row_floor)] + [self.cost(max(k + 1, self.row_floor))
                                                              for k in range(1, self.k_max + 1)]
        return self._cost_cache

    def reach(self, room: int) -> int:
        """How far a drafter that stops where unsure may be asked: the widest call priced."""
        return min(self.k_max, room)

    def confident_length(self, k: int, confidence: Sequence[float]) -> int:
        """How much of a confident drafter's proposal to verify, none to all of it: the length whose
        call delivers the most tokens per price, each token right with the acceptance measured for
        drafts the drafter rated as it rates this one (``ConfidenceCalibration``). (A token map
        recalling a command said before is sure of all of it: on an AVX2-only EPYC three 4-row calls
        at K 3 cost 3.8 steps for 12 tokens that one 12-row call verifies for 2.3; on a command
        never heard its n-gram guesses are worth less than it says, and a plain step pays more.)
        ``k``, the draft length learned from every round, bounds only what positions teach it."""
        costs = self._costs()
        p, tokens = 1.0, 1.0
        best_n, best = 0, 1.0 / costs[0]
        for j in range(min(len(confidence), self.k_max)):
            p *= self.calibration(confidence[j])
            tokens += p
            if tokens / costs[j + 1] > best + 1e-9:
                best_n, best = j + 1, tokens / costs[j + 1]
        self._confident_round = (k, list(confidence[:best_n]))
        return best_n

    def expected_speedup(self) -> float:
        """Tokens per single-row step that recent rounds delivered (1.0 means break-even with
        single-row greedy); see the class docstring."""
        return self._delivered_tokens / self._delivered_cost


@dataclass
class NoDrafts:
    """A batch-invariant window that drafts nothing: plain 1-row calls on a decoder whose 1-row
    step is the fastest greedy there is (the invariant decoder where ``preferred``), chosen when
    ``learner`` does not expect drafts to beat those steps. With a row floor of 1 a draft is not
    free: a 2-row call costs 1.14-1.33 of a 1-row step on the Xeon, and prompt lookup's drafts,
    accepted 11-35 % of the time on read speech, made such windows 2-11 % slower than plain steps.
    The window's rounds teach nothing; its tokens are replayed in the shadow into ``learner``
    afterwards (``decoder.learn_from_window``), so a later window drafts again where it would pay."""

    learner: AdaptiveDraftLength
    why: str = ""

    def draft_len(self) -> int:
        return 0

    def record(self, n_proposed: int, n_accepted: int, filler_accepted: int = 0) -> None:
        pass

    @property
    def cost(self) -> VerifyCost:
        return self.learner.cost

    def expected_speedup(self) -> float:
        """What plain 1-row calls give, in the learner's units (single-row greedy = 1.0)."""
        return 1.0 / self.learner.cost(1)


def drafts_pay_on_plain_steps(policy: AdaptiveDraftLength, margin: float) -> bool:
    """Whether ``policy`` expects drafting to beat plain 1-row calls of its own price curve by
    ``margin``: the test for a window that is batch-invariant anyway (see ``NoDrafts``)."""
    return policy.expected_speedup() * policy.cost(1) >= margin


def plain_steps_instead(policy, row_floor: int, draft_hint: bool = False) -> NoDrafts | None:
    """For a batch-invariant window on the preferred invariant decoder: the ``NoDrafts`` policy
    where drafts are not expected to beat its plain 1-row steps (a row floor of 1, no draft hint
    such as a live stream's previous pass, an adaptive policy), else None (the window drafts).
    The engine and the benchmarks' replay decide alike through this."""
    if row_floor != 1 or draft_hint or not isinstance(policy, AdaptiveDraftLength) \
            or drafts_pay_on_plain_steps(policy, SPECULATE_MARGIN):
        return None
    return NoDrafts(policy, f"drafts expected {policy.expected_speedup() * policy.cost(1):.2f}x its plain "
                            f"steps < {SPECULATE_MARGIN:.2f}x: none drafted")


def default_policy(cost: VerifyCost, row_floor: int, row_ceiling: int, strong: bool) -> AdaptiveDraftLength:
    """The engine's draft-length policy before any evidence: a domain token map (``strong``) is
    expected to pay, prompt lookup alone is not."""
    return AdaptiveDraftLength(cost, row_floor=row_floor, k_max=max(1, row_ceiling - 1),
                               prior=0.7 if strong else 0.3, prior_coverage=0.8 if strong else 0.3)


FIRST_DRAFT_MIN = 0.5  # expected accepted drafts after the first token for a policy-chosen window to speculate


def first_token_gate(chain, policy) -> Callable[[list[int]], bool] | None:
    """Speculate a window only if the drafters expect to be right after its first token.

    A map that does not fit the speech (read speech with a car-command map) has little to
    say there (at best a guess of EOT at 16 %), and a window speculated without good drafts
    pays the batch-invariant premium for nothing. Where the drafter rates its tokens
    (``last_confidence``) the expected number accepted must reach ``FIRST_DRAFT_MIN``, unless
    a drafter has seen utterances begin with this token (``knows_start``): in-domain commands
    whose second word is open ("Please ...") still gained 1.05-1.3x from speculation, while
    every misfit window on read speech began with a token the map had never seen start one.
    Drafters with a cost or state per proposal (draft models) are not asked: no gate (None).
    """
    if any(getattr(d, "costly", False) for d in chain.drafters):
        return None

    def gate(tokens: list[int]) -> bool:
        if chain.knows_start(tokens):
            return True
        proposal = chain.propose(tokens, max(1, policy.draft_len()))
        confidence = chain.last_confidence
        if not proposal or not confidence:
            return bool(proposal)
        return expected_tokens(confidence, len(confidence)) - 1.0 >= FIRST_DRAFT_MIN

    return gate


SPECULATE_MARGIN = 1.10  # expected speedup a window needs before it is speculated (see choose_numerics)


def choose_numerics(requested: str, speculation: bool, row_floor: int | None, has_drafters: bool,
                    expected_speedup: float, margin: float = SPECULATE_MARGIN) -> tuple[str, str]:
    """Numerics for the next window and why: pinned by the user, or batch-invariant where drafting pays.

    ``margin``: the cost model prices calls as a calibration run measures them, and the loop pays
    more (drafter and bookkeeping per round, colder caches after the encoder: on base int8 here a
    3-row call cost 1.22-1.32 in-loop steps against 1.16 calibrated), so a window is speculated
    only where the model expects at least a 10 % gain; below that a map that does not fit the
    speech (real read speech with a car-command map) would cost up to 6 %.
    """
    if requested == "single-row":
        return "single-row", "pinned by the user"
    if requested == "batch-invariant":
        if row_floor is None:
            return "single-row", "batch-invariance self-test failed on this machine"
        return "batch-invariant", "pinned by the user"
    if not speculation:
        return "single-row", "speculation off"
    if row_floor is None:
        return "single-row", "batch-invariance self-test failed on this machine"
    if not has_drafters:
        return "single-row", "no drafter"
    if expected_speedup == float("inf"):
        return "batch-invariant", "a draft-length rule that assumes speculation pays (e.g. a fixed draft length)"
    if expected_speedup >= margin:
        return "batch-invariant", f"expected speedup {expected_speedup:.2f}x"
    return "single-row", f"expected speedup {expected_speedup:.2f}x < {margin:.2f}x"


def realised_speedup(tokens: int, steps: int, calls_by_rows: dict[int, int], cost: VerifyCost) -> float | None:
    """What a window's decoding delivered in the units the policy predicts in: tokens after the
    prefill's first over its decoder calls priced by ``cost`` (a 1-row step = 1.0), so 1.0 is
    single-row greedy. Logged beside the prediction, it shows where the policy's estimate and the
    window parted (acceptance, not prices: both sides use the same price curve). None where no
    call was priced (a window decoded by CTranslate2's own loop, or one token long)."""
    priced = steps + sum(n * cost(rows) for rows, n in calls_by_rows.items())
    return (tokens - 1) / priced if priced > 0 and tokens > 1 else None


def draft_model_expected_speedup(accept_by_pos: list[float], k: int, main_step_ms: float, draft_step_ms: float,
                                 verify_cost: VerifyCost, row_floor: int = 2,
                                 overhead_ms_per_token: float = 0.0, parallel: bool = False) -> float:
    """Speedup over single-row greedy of drafting ``k`` tokens a round with a draft model.

    One round costs ``k`` draft-model calls (the first also feeds the main model's correction)
    plus one verify call of ``max(k + 1, row_floor)`` rows, and yields ``E(k)`` tokens
    (``expected_tokens``); greedy would have spent ``E(k)`` main steps on them. So, with
    ``r = draft_step_ms / main_step_ms`` and ``c = verify_cost``::

        speedup = E(k) / (k * r + c(max(k + 1, floor)) + E(k) * overhead / main_step_ms)

    Break-even rule: drafting pays only if ``E(k) > k * r + c(k + 1)``. As ``E(k) <= k + 1``,
    a draft model can never pay unless ``r < (k + 1 - c(k + 1)) / k`` even at 100 % acceptance:
    on CPU with the decoder on 1 thread (c(3) ~ 1.15, c(5) ~ 1.3) that is r < 0.93 at k = 4 and
    r < 0.93 at k = 2; at 80 % acceptance per position r must be below ~0.52 (k = 4) or ~0.45
    (k = 2); with 2-thread calls (c ~ 1.8) below ~0.39. ``overhead_ms_per_token`` spreads fixed
    costs (the draft model's own encoder and prefill per window) over the window's tokens.
    Whisper tiny.en drafting for base on CPU has r ~ 0.5-0.7 (the 51k-row output projection,
    shared by both sizes, dominates a step) plus an encoder of ~30 % of base's: at or below
    break-even, so the policy must refuse it there.

    ``parallel``: the draft model decodes ahead on a core of its own (``DraftAhead``) while the
    main model verifies, so a round costs the slower of the two. Ahead, the draft model must
    decode every token a round emits (``E(k)`` of them) to stay ahead: a round costs
    ``max(E(k) * r, c(k + 1))``. (Priced at ``k * r``, a model whose step is half the main
    round's was expected to keep 3 drafts ready; it kept 1.17 a round on the LJ passage.)
    """
    if k <= 0 or main_step_ms <= 0:
        return 1.0
    e = expected_tokens(accept_by_pos or [0.0], k)
    verifying = verify_cost(max(k + 1, row_floor))
    rounds = max(e * draft_step_ms / main_step_ms, verifying) if parallel else k * draft_step_ms / main_step_ms + verifying
    return e / (rounds + e * overhead_ms_per_token / main_step_ms)


def draft_model_best_k(accept_by_pos: list[float], main_step_ms: float, draft_step_ms: float, verify_cost: VerifyCost,
                       row_floor: int = 2, overhead_ms_per_token: float = 0.0, k_max: int = 8,
                       parallel: bool = False) -> tuple[int, float]:
    """The draft length with the highest ``draft_model_expected_speedup``, and that speedup."""
    best = (1, draft_model_expected_speedup(accept_by_pos, 1, main_step_ms, draft_step_ms, verify_cost, row_floor,
                                            overhead_ms_per_token, parallel))
    for k in range(2, k_max + 1):
        s = draft_model_expected_speedup(accept_by_pos, k, main_step_ms, draft_step_ms, verify_cost, row_floor,
                                         overhead_ms_per_token, parallel)
        if s > best[1] + 1e-9:
            best = (k, s)
    return best
