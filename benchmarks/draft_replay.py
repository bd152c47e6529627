"""Replay recorded model tokens through the engine's own decoding loop, with an oracle for a decoder.

Speculation never changes the tokens, so what a drafter achieves on a clip is a fixed function of
the tokens the model emits there. Given those tokens (from a ``command_stream`` run), the engine's
loop (``decode_window``), token-map drafter, draft-length policy, filler, first-token gate and
``choose_numerics`` run every round as they would; only the decoder is replaced by an oracle that
accepts what greedy would, and each call is priced with a cost curve (rows -> single-row steps).
On ``results/stream5`` this reproduces the held-out verify-call and accepted-draft counts exactly
and the stream's within 0.4 %, with modelled speedups 1-4 % above the timed ones, so a drafting
idea costs seconds to try instead of a 20-minute benchmark. Speedups here are modelled, not timed:
confirm with the benchmark.

    python -m benchmarks.draft_replay --from results/stream5/heldout.json
    python -m benchmarks.draft_replay --from results/stream5/heldout.json --grid min_cum=0,0.05,0.2 --grid backoff=1,4
    python -m benchmarks.draft_replay --from results/stream5/stream.json

Inputs: the held-out part's JSON (each clip's batch-invariant greedy tokens, in the order the run
decoded them) or the stream part's (each learner's own tokens in stream order: a window it
decoded single-row holds single-row tokens), and the token maps they name. Row range and
cost curve: as each engine of the run recorded them (``meta.engines``, runs since 2026-11-23
21:50), else base int8 on this project's Xeon with MKL kernels (rows 3-17; ``CT2_USE_MKL=0`` gives
rows 2-12 there), or ``--row-floor``, ``--row-ceiling``, ``--cost``; the prefill's price: as the
run's single-row greedy timed it, or ``--prefill-steps``. Stream utterances carry their clip's speech
length (``--length-jitter`` scatters it, as a user saying a command again would). A stream replay
also prints two ceilings that no drafter can pass with this prefill and cost curve: every repeat
drafted right, and every utterance drafted right. Single-window commands only: the decoder's
position limit never binds there.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specwhisper.decoder import decode_with_drafters, learn_from_window
from specwhisper.drafters.base import WindowContext
from specwhisper.drafters.bigram import BigramGuesser, map_then_bigram
from specwhisper.drafters.chain import DrafterChain
from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter
from specwhisper.policy import VerifyCost, choose_numerics, default_policy, plain_steps_instead
from specwhisper.stats import DecodeStats
from specwhisper.tokenizer import WhisperTokenizer
from specwhisper.tokenmap import load_token_map

from .oracle_session import OracleSession, priced_calls

REPO = Path(__file__).resolve().parents[1]
# Base int8 on this project's Xeon, decoder on 1 thread (LoadedModel.call_costs, MKL kernels).
MEASURED_COST = {1: 1.0, 2: 1.037, 3: 1.224, 4: 1.224, 6: 1.418, 8: 1.5, 12: 1.717, 17: 2.052}
PREFILL_STEPS = 4.4  # a full-window prefill in single-row steps (51.5 ms / 11.8 ms in results/stream5)
MAX_NEW_TOKENS = 224  # the engine's cap on a window's new tokens: MAX_POSITIONS // 2


@dataclass
class ReplayTotals:
    """Modelled cost of a replay against single-row greedy, in single-row steps."""

    utterances: int = 0
    greedy_steps: float = 0.0
    spec_steps: float = 0.0
    prefills: float = 0.0
    spec_prefills: float = 0.0  # the speculating engine's own (the invariant decoder's is cheaper)
    stats: DecodeStats = field(default_factory=DecodeStats)
    numerics: dict[str, int] = field(default_factory=dict)

    def row(self) -> dict:
        st = self.stats
        return {"utterances": self.utterances, "verify_calls": st.verify_calls, "accepted": st.accepted,
                "drafted": st.drafted, "Ar": st.accepted / st.drafted if st.drafted else 0.0,
                "Al": st.accepted / st.verify_calls if st.verify_calls else 0.0,
                "steps_speedup": self.greedy_steps / self.spec_steps if self.spec_steps else 0.0,
                "decoder_speedup": (self.greedy_steps + self.prefills) / (self.spec_steps + self.spec_prefills)
                if self.spec_steps else 0.0, "numerics": dict(self.numerics)}


@dataclass
class Replayer:
    """One engine's drafting state (drafter, policy, filler bigrams) replayed over utterances."""

    drafter: TokenMapDrafter
    tokenizer: WhisperTokenizer
    numerics: str = "batch-invariant"
    cost: VerifyCost = field(default_factory=lambda: VerifyCost(MEASURED_COST))
    row_floor: int = 3
    row_ceiling: int = 17
    prefill_steps: float = PREFILL_STEPS
    spec_prefill_steps: float | None = None  # the speculating engine's prefill (default: ``prefill_steps``)
    learn_filler: bool = False  # the engine shares its filler bigrams across calls only when it learns
    max_new_tokens: int = MAX_NEW_TOKENS
    gate: bool = True  # False where batch-invariant windows run on the invariant decoder (no first-token gate)
    # The engine's self-test found the invariant decoder faster than single-row: ``auto`` windows are
    # batch-invariant and draft only where drafts beat its plain steps (``NoDrafts`` otherwise).
    preferred: bool = False

    def __post_init__(self) -> None:
        self.chain = DrafterChain([self.drafter])
        self.policy = default_policy(self.cost, self.row_floor, self.row_ceiling, strong=True)
        self.guesser = BigramGuesser(self.tokenizer)
        self.totals = ReplayTotals()

    def utterance(self, tokens: Sequence[int], speech_s: float | None = None) -> dict:
        """Decode one single-window utterance whose greedy tokens (EOT excluded) are ``tokens`` and
        whose speech lasted ``speech_s`` seconds; returns its own modelled costs."""
        eot, cap = self.tokenizer.special.eot, self.max_new_tokens
        if not tokens:
            raise ValueError("an utterance without tokens: the engine's first token is never EOT")
        guesser = self.guesser if self.learn_filler else BigramGuesser(self.tokenizer)
        policy = self.policy
        if self.preferred and self.numerics == "auto":  # as WindowNumerics.choose
            numerics = "batch-invariant"
            policy = plain_steps_instead(self.policy, self.row_floor) or policy
        else:
            numerics, _ = choose_numerics(self.numerics, True, self.row_floor, True, self.policy.expected_speedup())
        session = OracleSession(tokens, eot, numerics, self.row_floor, self.row_ceiling, can_go_single_row=self.gate)
        self.chain.begin(WindowContext(prompt=(), eot=eot, max_new_tokens=cap, speech_s=speech_s))
        stats = DecodeStats()
        out = decode_with_drafters(session, self.chain, policy, cap, eot, stats,
                                   map_then_bigram(self.drafter, guesser), gated=self.numerics == "auto")
        if out != [*tokens, eot][:cap]:
            raise AssertionError("the oracle session changed the tokens: the replay is broken")
        learn_from_window(self.chain, out, session.numerics, policy, stats, guesser, eot)
        spec_prefill = self.prefill_steps if self.spec_prefill_steps is None else self.spec_prefill_steps
        one = {"greedy_steps": len(out) - 1, "prefills": self.prefill_steps, "spec_prefill": spec_prefill,
               "spec_steps": stats.steps + priced_calls(stats, self.cost, self.row_floor)}
        t = self.totals
        t.utterances += 1
        t.greedy_steps += one["greedy_steps"]
        t.spec_steps += one["spec_steps"]
        t.prefills += one["prefills"]
        t.spec_prefills += spec_prefill
        t.numerics[session.numerics] = t.numerics.get(session.numerics, 0) + 1
        t.stats.merge(stats)
        return one


def _speedup(parts: list[dict]) -> float:
    greedy = sum(p["greedy_steps"] + p["prefills"] for p in parts)
    spec = sum(p["spec_steps"] + p["spec_prefill"] for p in parts)
    return round(greedy / spec, 3) if spec else 0.0


def heldout_tokens(doc: dict, set_name: str) -> tuple[list[tuple[str, list[int]]], Path]:
    """Each clip's batch-invariant greedy tokens, in the order the run decoded the clips, and the set's map."""
    entry = doc["heldout"]["sets"][set_name]
    tokens: dict[str, list[int]] = {}
    for r in entry["records"]:
        if r["system"] == "greedy-batch-invariant":
            tokens.setdefault(r["clip"], r["tokens"])
    return list(tokens.items()), REPO / entry["tokenmap"]


def stream_tokens(doc: dict, system: str) -> tuple[list[tuple[str, list[int]]], Path]:
    """One learner's own tokens for every utterance of a stream run, in stream order, and the static map."""
    part = doc["stream"]
    records = sorted((r for r in part["records"] if r["system"] == system), key=lambda r: r["utterance"])
    if not records:
        raise SystemExit(f"no records of {system} in this stream run (systems: {part['systems']})")
    return [(r["clip"], r["tokens"]) for r in records], REPO / part["tokenmap"]


def make_drafter(tmap, tokenizer, learn: str, knobs: dict) -> TokenMapDrafter:
    """``learn``: "" (static map only), "empty" (learned map only) or "static" (both)."""
    static = tmap if learn in ("", "static") else None
    return TokenMapDrafter(static, tokenizer, learn=bool(learn), **knobs)


def recorded_settings(doc: dict, engine_key: str, records: list[dict], system: str | None = None) -> dict:
    """Row range and cost curve the run's engine used (runs since the engines were recorded), the
    prefill in single-row steps as single-row greedy timed it in ``records``, and, where the curve
    prices a 1-row call of the engine below the fork's (the invariant decoder preferred, as on an
    AVX2-only CPU), that preference and ``system``'s own prefill; else {}."""
    out: dict = {}
    e = doc.get("meta", {}).get("engines", {}).get(engine_key)
    if e:
        cost = {int(k): float(v) for k, v in e["cost"].items()}
        out.update({"row_floor": e["row_floor"], "row_ceiling": e["row_ceiling"], "cost": VerifyCost(cost)})
        if cost.get(1, 1.0) < 1.0:  # WindowNumerics: batch-invariant windows, no first-token gate
            out.update({"preferred": True, "gate": False})
    greedy = [r for r in records if r.get("system") == "greedy-single-row" and r.get("steps")]
    if greedy and all("prefill_s" in r for r in greedy):
        step_s = sum(r["steps_s"] for r in greedy) / sum(r["steps"] for r in greedy)
        out["prefill_steps"] = sum(r["prefill_s"] for r in greedy) / len(greedy) / step_s
        own = [r["prefill_s"] for r in records if r.get("system") == system and "prefill_s" in r]
        if own:
            out["spec_prefill_steps"] = sum(own) / len(own) / step_s
    return out


def perfect_steps(n_after_first: int, cost: VerifyCost, row_floor: int, row_ceiling: int) -> float:
    """Decoder calls of a window whose every draft is right: after the prefill's token, calls of up
    to ``row_ceiling`` rows each confirm that many tokens (the drafts and the model's own next one)."""
    steps, left = 0.0, n_after_first
    while left > 0:
        rows = min(left, row_ceiling)
        steps += cost(max(rows, row_floor))
        left -= rows
    return steps


def replay_heldout(doc: dict, set_name: str, tokenizer, numerics: str, knobs: dict, learn: bool = False,
                   **settings) -> dict:
    """A held-out set as the benchmark decodes it; ``learn``: as an engine with ``--learn`` on top of
    the map would, each clip heard once (the benchmark's held-out part does not learn)."""
    settings = {**recorded_settings(doc, "tm-bi" if numerics == "batch-invariant" else "tm-auto",
                                    doc["heldout"]["sets"][set_name]["records"],
                                    "tokenmap-bi" if numerics == "batch-invariant" else "tokenmap-auto"), **settings}
    clips, map_path = heldout_tokens(doc, set_name)
    drafter = make_drafter(load_token_map(map_path, tokenizer), tokenizer, "static" if learn else "", knobs)
    replayer = Replayer(drafter, tokenizer, numerics, learn_filler=learn, **settings)
    length = speech_lengths(set_name.split("@")[0])
    for clip, tokens in clips:
        replayer.utterance(tokens, length(clip))
    return replayer.totals.row()


def speech_lengths(set_name: str, jitter: float = 0.0, seed: int = 0) -> Callable[[str], float]:
    """Each clip's speech length (as the engine measures it), times ``exp(N(0, jitter))`` drawn anew
    for every utterance: a repeat said faster or slower than the first time, where the benchmark
    replays the very same recording."""
    from specwhisper.audio import load_audio, speech_seconds

    from .data import load_set, shared_data_root

    clips = {c.id: c for c in load_set(set_name, shared_data_root())}
    cache: dict[str, float] = {}
    rng = random.Random(seed)

    def length(clip_id: str) -> float:
        if clip_id not in cache:
            cache[clip_id] = speech_seconds(load_audio(clips[clip_id].path))
        return cache[clip_id] * (math.exp(rng.gauss(0.0, jitter)) if jitter else 1.0)

    return length


def replay_stream(doc: dict, tokenizer, learn: str, knobs: dict, block: int = 50, jitter: float = 0.0,
                  **settings) -> dict:
    """A stream run's learner (``learn`` "empty" or "static") replayed on its own tokens, with
    speedups per block and split into first hearings and repeats."""
    settings = {**recorded_settings(doc, f"learn-{learn}", doc["stream"]["records"], f"learn-{learn}"), **settings}
    utterances, map_path = stream_tokens(doc, f"learn-{learn}")
    drafter = make_drafter(load_token_map(map_path, tokenizer), tokenizer, learn, knobs)
    replayer = Replayer(drafter, tokenizer, doc["stream"].get("numerics", "auto"), learn_filler=True, **settings)
    length = speech_lengths(doc["stream"].get("set", "car"), jitter)
    parts, first, seen = [], [], set()
    for clip, tokens in utterances:
        parts.append(replayer.utterance(tokens, length(clip)))
        first.append(clip not in seen)
        seen.add(clip)
    perfect = [{**p, "spec_steps": perfect_steps(p["greedy_steps"], replayer.cost, replayer.row_floor,
                                                 replayer.row_ceiling)} for p in parts]
    return {**replayer.totals.row(), "blocks": [_speedup(parts[i:i + block]) for i in range(0, len(parts), block)],
            "first_hearings": [sum(first), _speedup([p for p, f in zip(parts, first) if f])],
            "repeats": [len(first) - sum(first), _speedup([p for p, f in zip(parts, first) if not f])],
            # ceilings for any drafter: every repeat drafted right, or every utterance
            "bound_perfect_repeats": _speedup([q if not f else p for p, q, f in zip(parts, perfect, first)]),
            "bound_perfect_all": _speedup(perfect), "prefill_steps": round(replayer.prefill_steps, 2)}


def _knob_grid(specs: list[str]) -> list[dict]:
    axes = []
    for spec in specs:
        name, _, values = spec.partition("=")
        axes.append([(name, ast.literal_eval(v)) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.draft_replay", description=__doc__.split("\n")[0])
    p.add_argument("--from", dest="source", required=True, help="a command_stream JSON (held-out or stream part)")
    p.add_argument("--model", default="base", help="model name or CT2 directory (for its tokenizer)")
    p.add_argument("--sets", default=None, help="held-out sets to replay (default: all in the file)")
    p.add_argument("--numerics", default="batch-invariant,auto", help="held-out systems to replay")
    p.add_argument("--heldout-learn", action="store_true",
                   help="held-out: learn each clip's tokens after decoding it, as --learn would")
    p.add_argument("--learn", default="empty,static", help="stream learners to replay: empty, static")
    p.add_argument("--set", dest="knobs", action="append", default=[],
                   help="a TokenMapDrafter setting, e.g. min_cum=0.2 (repeatable)")
    p.add_argument("--grid", action="append", default=[], help="knob=v1,v2,...: replay every combination")
    p.add_argument("--row-floor", type=int, default=None,
                   help="rows every verify call carries (default: as the run recorded, else 3)")
    p.add_argument("--row-ceiling", type=int, default=None,
                   help="most rows a call may carry (default: as the run recorded, else 17)")
    p.add_argument("--cost", default=None, help='JSON rows -> single-row steps, e.g. \'{"1": 1, "3": 1.2, "17": 2}\' '
                                                "(default: the curve the run recorded, else this Xeon's)")
    p.add_argument("--prefill-steps", type=float, default=None,
                   help=f"a prefill in single-row steps (default: as the run timed it, else {PREFILL_STEPS})")
    p.add_argument("--length-jitter", type=float, default=0.0,
                   help="stream: scatter each utterance's speech length by exp(N(0, X)), e.g. 0.1")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    from specwhisper.model_store import resolve_model

    tokenizer = WhisperTokenizer.from_model_dir(resolve_model(args.model))
    doc = json.loads(Path(args.source).read_text(encoding="utf-8"))
    cost = VerifyCost({int(k): float(v) for k, v in json.loads(args.cost).items()}) if args.cost else None
    settings = {k: v for k, v in (("row_floor", args.row_floor), ("row_ceiling", args.row_ceiling), ("cost", cost),
                                  ("prefill_steps", args.prefill_steps)) if v is not None}
    fixed = {k: ast.literal_eval(v) for k, v in (spec.split("=", 1) for spec in args.knobs)}
    rows = []
    for knobs in _knob_grid(args.grid):
        knobs = {**fixed, **knobs}
        if "stream" in doc:
            for learn in args.learn.split(","):
                r = replay_stream(doc, tokenizer, learn, knobs, jitter=args.length_jitter, **settings)
                rows.append({"scenario": f"stream learn-{learn}", "knobs": knobs, **r})
        else:
            for set_name in (args.sets.split(",") if args.sets else list(doc["heldout"]["sets"])):
                for numerics in args.numerics.split(","):
                    r = replay_heldout(doc, set_name, tokenizer, numerics, knobs, args.heldout_learn, **settings)
                    rows.append({"scenario": f"held-out {set_name} {numerics}", "knobs": knobs, **r})
    for r in rows:
        extra = (f" blocks {r['blocks']} first hearings {r['first_hearings']} repeats {r['repeats']}"
                 f" bounds: perfect repeats {r['bound_perfect_repeats']}x, perfect all {r['bound_perfect_all']}x"
                 f" (prefill {r['prefill_steps']} steps)" if "blocks" in r else "")
        print(f"{r['scenario']:<34} {json.dumps(r['knobs']):<28} calls {r['verify_calls']:>5} acc {r['accepted']:>5} "
              f"Al {r['Al']:.2f} steps {r['steps_speedup']:.3f}x decoder {r['decoder_speedup']:.3f}x "
              f"{r['numerics']}{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
