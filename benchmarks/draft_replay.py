"""Replay recorded model tokens through the engine's own decoding loop, with an oracle for a decoder.

Speculation never changes the tokens, so what a drafter achieves on a clip is a fixed function of
the tokens the model emits there. Given those tokens (from a benchmark run), the engine's loop
(``decode_window``), drafters, draft-length policy, filler and first-token gate run every round
as they would; only the decoder is replaced by an oracle that accepts what greedy would, and each
call is priced with a cost curve (rows -> single-row steps). On ``results/stream5`` this
reproduces the measured verify-call and accepted-draft counts exactly (car 371/310, smarthome
391/280) and the measured speedups within 1 %, so a drafting idea costs seconds to try instead of a
20-minute benchmark. Speedups here are modelled, not timed: confirm with the benchmark.

    python -m benchmarks.draft_replay --from results/stream5/heldout.json
    python -m benchmarks.draft_replay --from results/stream5/heldout.json --grid min_cum=0,0.05,0.2 --grid backoff=1,4
    python -m benchmarks.draft_replay --from results/stream5/heldout.json --stream car --learn empty,static

Inputs: a ``command_stream`` JSON (held-out part: each clip's batch-invariant greedy tokens) and
the token maps it names. ``--stream SET`` replays that set's clips in the benchmark's seeded Zipf
order with online learning.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specwhisper.decoder import decode_window, shadow_replay
from specwhisper.drafters.base import WindowContext
from specwhisper.drafters.bigram import BigramGuesser, map_then_bigram
from specwhisper.drafters.chain import DrafterChain
from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter
from specwhisper.policy import VerifyCost, choose_numerics, default_policy, first_token_gate
from specwhisper.stats import DecodeStats
from specwhisper.tokenizer import WhisperTokenizer
from specwhisper.tokenmap import load_token_map

from .oracle_session import OracleSession
from .tokenmap_sim import zipf_stream

REPO = Path(__file__).resolve().parents[1]
# Base int8 on this project's Xeon, decoder on 1 thread (LoadedModel.call_costs, MKL kernels).
MEASURED_COST = {1: 1.0, 2: 1.037, 3: 1.224, 4: 1.224, 6: 1.418, 8: 1.5, 12: 1.717, 17: 2.052}
PREFILL_STEPS = 4.4  # a full-window prefill in single-row steps (51.5 ms / 11.8 ms in results/stream5)


@dataclass
class ReplayTotals:
    """Modelled cost of a replay against single-row greedy, in single-row steps."""

    utterances: int = 0
    greedy_steps: float = 0.0
    spec_steps: float = 0.0
    prefills: float = 0.0
    stats: DecodeStats = field(default_factory=DecodeStats)
    numerics: dict[str, int] = field(default_factory=dict)

    def row(self) -> dict:
        st = self.stats
        return {"utterances": self.utterances, "verify_calls": st.verify_calls, "accepted": st.accepted,
                "drafted": st.drafted, "Ar": st.accepted / st.drafted if st.drafted else 0.0,
                "Al": st.accepted / st.verify_calls if st.verify_calls else 0.0,
                "steps_speedup": self.greedy_steps / self.spec_steps if self.spec_steps else 0.0,
                "decoder_speedup": (self.greedy_steps + self.prefills) / (self.spec_steps + self.prefills)
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
    learn_filler: bool = False

    def __post_init__(self) -> None:
        self.chain = DrafterChain([self.drafter])
        self.policy = default_policy(self.cost, self.row_floor, self.row_ceiling, strong=True)
        self.guesser = BigramGuesser(self.tokenizer)
        self.totals = ReplayTotals()

    def utterance(self, tokens: Sequence[int]) -> None:
        """Decode one single-window utterance whose greedy tokens (EOT excluded) are ``tokens``."""
        eot = self.tokenizer.special.eot
        guesser = self.guesser if self.learn_filler else BigramGuesser(self.tokenizer)
        numerics, _ = choose_numerics(self.numerics, True, self.row_floor, True, self.policy.expected_speedup())
        session = OracleSession(tokens, eot, numerics, self.row_floor, self.row_ceiling)
        self.chain.begin(WindowContext(prompt=(), eot=eot, max_new_tokens=224))
        gate = first_token_gate(self.chain, self.policy) if self.numerics == "auto" else None
        speculating = numerics == "batch-invariant"
        stats = DecodeStats()
        out = decode_window(session, self.chain if speculating else DrafterChain([]), self.policy, 224, eot, stats,
                            map_then_bigram(self.drafter, guesser), gate if speculating else None)
        if out != [*tokens, eot]:
            raise AssertionError("the oracle session changed the tokens: the replay is broken")
        if session.numerics != "batch-invariant":
            shadow_replay(self.chain, out, self.policy.draft_len(), stats, self.policy)
        self.chain.end(list(tokens))
        guesser.learn(list(tokens))
        t = self.totals
        t.utterances += 1
        t.greedy_steps += len(tokens)  # EOT included, the prefill's token excluded
        t.spec_steps += stats.steps + sum(self.cost(max(r, self.row_floor)) * n for r, n in stats.calls_by_rows.items())
        t.prefills += self.prefill_steps
        t.numerics[session.numerics] = t.numerics.get(session.numerics, 0) + 1
        t.stats.merge(stats)


def heldout_tokens(doc: dict, set_name: str) -> tuple[list[tuple[str, list[int]]], Path]:
    """Each clip's batch-invariant greedy tokens (in clip order) and the set's map, from a held-out run."""
    entry = doc["heldout"]["sets"][set_name]
    tokens: dict[str, list[int]] = {}
    for r in entry["records"]:
        if r["system"] == "greedy-batch-invariant":
            tokens.setdefault(r["clip"], r["tokens"])
    return sorted(tokens.items()), REPO / entry["tokenmap"]


def make_drafter(tmap, tokenizer, learn: str, knobs: dict) -> TokenMapDrafter:
    """``learn``: "" (static map only), "empty" (learned map only) or "static" (both)."""
    static = tmap if learn in ("", "static") else None
    return TokenMapDrafter(static, tokenizer, learn=bool(learn), **knobs)


def replay_heldout(doc: dict, set_name: str, tokenizer, numerics: str, knobs: dict) -> dict:
    clips, map_path = heldout_tokens(doc, set_name)
    replayer = Replayer(make_drafter(load_token_map(map_path, tokenizer), tokenizer, "", knobs), tokenizer, numerics)
    for _, tokens in clips:
        replayer.utterance(tokens)
    return replayer.totals.row()


def replay_stream(doc: dict, set_name: str, tokenizer, learn: str, knobs: dict, length: int = 300, seed: int = 0,
                  s: float = 1.1, block: int = 50) -> dict:
    """The benchmark's repeated-command stream (seeded Zipf order over the set's clips), learning online."""
    clips, map_path = heldout_tokens(doc, set_name)
    order = zipf_stream(len(clips), length, seed, s)
    replayer = Replayer(make_drafter(load_token_map(map_path, tokenizer), tokenizer, learn, knobs), tokenizer,
                        "auto", learn_filler=True)
    blocks, last = [], ReplayTotals()
    for n, i in enumerate(order):
        replayer.utterance(clips[i][1])
        if (n + 1) % block == 0 or n + 1 == length:
            t = replayer.totals
            blocks.append(round((t.greedy_steps - last.greedy_steps + t.prefills - last.prefills)
                                / (t.spec_steps - last.spec_steps + t.prefills - last.prefills), 3))
            last = ReplayTotals(greedy_steps=t.greedy_steps, spec_steps=t.spec_steps, prefills=t.prefills)
    return {**replayer.totals.row(), "blocks": blocks}


def _knob_grid(specs: list[str]) -> list[dict]:
    axes = []
    for spec in specs:
        name, _, values = spec.partition("=")
        axes.append([(name, ast.literal_eval(v)) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.draft_replay", description=__doc__.split("\n")[0])
    p.add_argument("--from", dest="source", required=True, help="a command_stream JSON with a held-out part")
    p.add_argument("--model", default="base", help="model name or CT2 directory (for its tokenizer)")
    p.add_argument("--sets", default="car,smarthome")
    p.add_argument("--numerics", default="batch-invariant,auto", help="held-out systems to replay")
    p.add_argument("--stream", default=None, help="replay a repeated-command stream of this set instead")
    p.add_argument("--learn", default="empty,static", help="stream learners: empty, static")
    p.add_argument("--seed", type=int, default=0, help="the stream's Zipf order seed (the benchmark uses 0)")
    p.add_argument("--set", dest="knobs", action="append", default=[],
                   help="a TokenMapDrafter setting, e.g. min_cum=0.2 (repeatable)")
    p.add_argument("--grid", action="append", default=[], help="knob=v1,v2,...: replay every combination")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    from specwhisper.model_store import resolve_model

    tokenizer = WhisperTokenizer.from_model_dir(resolve_model(args.model))
    doc = json.loads(Path(args.source).read_text(encoding="utf-8"))
    fixed = {k: ast.literal_eval(v) for k, v in (spec.split("=", 1) for spec in args.knobs)}
    rows = []
    for knobs in _knob_grid(args.grid):
        knobs = {**fixed, **knobs}
        if args.stream:
            for learn in args.learn.split(","):
                r = replay_stream(doc, args.stream, tokenizer, learn, knobs, seed=args.seed)
                rows.append({"scenario": f"stream {args.stream} learn-{learn}", "knobs": knobs, **r})
        else:
            for set_name in args.sets.split(","):
                for numerics in args.numerics.split(","):
                    r = replay_heldout(doc, set_name, tokenizer, numerics, knobs)
                    rows.append({"scenario": f"held-out {set_name} {numerics}", "knobs": knobs, **r})
    for r in rows:
        blocks = f" blocks {r['blocks']}" if "blocks" in r else ""
        print(f"{r['scenario']:<34} {json.dumps(r['knobs']):<28} calls {r['verify_calls']:>5} acc {r['accepted']:>5} "
              f"Al {r['Al']:.2f} steps {r['steps_speedup']:.3f}x decoder {r['decoder_speedup']:.3f}x "
              f"{r['numerics']}{blocks}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
