"""Offline drafting quality of the token-map drafter, without the decoder.

Reference transcripts stand in for model output (tokenised as the model emits them: " " + text,
then EOT). Each utterance runs through the engine's own decoding loop (``decode_window``) against
an oracle session (``oracle_session``): the first token comes from the prompt call, then every
round the policy picks K, the drafter proposes up to K tokens, rows up to the row floor are filled
with the drafter's guess, the oracle accepts the matching prefix plus one token of its own, and
the drafter is told how many it got right. Cost: a verify call of r rows costs c(r) single-row
steps (the engine's default CPU curve), greedy costs one step per token. Reference text is what
was said, not what the model heard: ``draft_replay`` replays the model's own tokens instead.

    python -m benchmarks.tokenmap_sim --model /path/to/base [--k auto|8] [--json out.json]

Scenarios: held-out commands (a map built from the domain train.txt files, scored on each test
set), and a repeated-command stream (the 60 car test utterances replayed in a seeded Zipf order,
learning online from an empty map and from the static map). A naive longest-match 3-gram drafter
is the reference point.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specwhisper.decoder import decode_window
from specwhisper.drafters.base import WindowContext
from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter
from specwhisper.policy import AdaptiveDraftLength, FixedDraftLength, VerifyCost
from specwhisper.stats import DecodeStats
from specwhisper.tokenizer import WhisperTokenizer
from specwhisper.tokenmap import TokenMap, build_token_map

from .oracle_session import OracleSession, priced_calls

REPO = Path(__file__).resolve().parents[1]


@dataclass
class SimStats:
    utterances: int = 0
    tokens: int = 0  # tokens the decoder loop must produce (EOT included, prompt-call token excluded)
    calls: int = 0
    cost: float = 0.0
    drafted: int = 0
    accepted: int = 0
    proposals: int = 0  # calls where the drafter proposed something
    filler_accepted: int = 0
    full: int = 0  # utterances drafted whole: one verify call after the first token
    k_sum: int = 0  # draft lengths the policy allowed, summed over calls

    def row(self) -> dict:
        return {
            "utterances": self.utterances, "tokens": self.tokens, "verify_calls": self.calls,
            "Ar": self.accepted / self.drafted if self.drafted else 0.0,
            "Al": self.accepted / self.calls if self.calls else 0.0,
            "tokens_per_call": self.tokens / self.calls if self.calls else 0.0,
            "coverage": self.proposals / self.calls if self.calls else 0.0,
            "speedup": self.tokens / self.cost if self.cost else 0.0,
            "filler_accepted": self.filler_accepted, "whole": self.full,
            "mean_k": self.k_sum / self.calls if self.calls else 0.0,
        }


class NaiveNgramDrafter:
    """Reference: longest matching context of at most ``n`` tokens, greedy best continuation, no confidence."""

    name = "naive-ngram"

    def __init__(self, tmap: TokenMap, n: int = 3) -> None:
        self.m, self.n = tmap, n

    def begin(self, window: WindowContext) -> None:
        pass

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        seq = [self.m.header.begin, *tokens]
        draft: list[int] = []
        while len(draft) < k:
            nxt = self.guess(seq[1:])
            if nxt is None:
                break
            draft.append(nxt)
            seq.append(nxt)
            if nxt == self.m.header.eot:
                break
        return draft

    def guess(self, tokens: Sequence[int]) -> int | None:
        seq = [self.m.header.begin, *tokens]
        for n in range(min(self.n, len(seq)), 0, -1):
            node = self.m.find(seq[-n:])
            if node >= 0 and self.m.best(node) >= 0:
                return self.m.token_of(self.m.best(node))
        return None

    def observe(self, n_accepted: int) -> None:
        pass

    def end(self, tokens: Sequence[int]) -> None:
        pass


def simulate(drafter, utterances: list[list[int]], window: WindowContext, policy, cost: VerifyCost,
             row_floor: int) -> SimStats:
    """Replay each utterance (text tokens) through the engine's loop against an oracle; see module docstring."""
    eot = window.eot
    st = SimStats()
    counting = _CountingDrafter(drafter)

    def filler(tokens: Sequence[int]) -> int:
        g = drafter.guess(tokens)
        return eot if g is None else g

    for text in utterances:
        stats = DecodeStats()
        counting.begin(window)
        decode_window(OracleSession(text, eot, "batch-invariant", row_floor, window.max_new_tokens), counting, policy,
                      window.max_new_tokens, eot, stats, filler)
        counting.end(text)
        st.utterances += 1
        st.tokens += len(text)  # EOT included, the prompt call's token excluded
        st.calls += stats.verify_calls
        st.cost += priced_calls(stats, cost, row_floor)
        st.drafted += stats.drafted - stats.filler_drafted
        st.accepted += stats.accepted - stats.filler_accepted
        st.filler_accepted += stats.filler_accepted
        st.k_sum += stats.k_sum
        st.full += stats.verify_calls == 1
    st.proposals = counting.proposals
    return st


class _CountingDrafter:
    """Passes every call through to ``inner`` and counts the rounds in which it proposed something."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.proposals = 0

    def begin(self, window: WindowContext) -> None:
        self.inner.begin(window)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        proposal = self.inner.propose(tokens, k)
        self.proposals += bool(proposal)
        return proposal

    def observe(self, n_accepted: int) -> None:
        self.inner.observe(n_accepted)

    def end(self, tokens: Sequence[int]) -> None:
        self.inner.end(tokens)


def make_policy(k: str, cost: VerifyCost, row_floor: int, strong: bool = True):
    if k == "auto":
        return AdaptiveDraftLength(cost, row_floor=row_floor, prior=0.7 if strong else 0.3,
                                   prior_coverage=0.8 if strong else 0.3)
    return FixedDraftLength(int(k))


def zipf_stream(n_items: int, length: int, seed: int, s: float = 1.1) -> list[int]:
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(n_items)
    weights = 1.0 / (np.arange(1, n_items + 1) ** s)
    return [int(ranks[i]) for i in rng.choice(n_items, size=length, p=weights / weights.sum())]


def _manifest_texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _resolve_model(name: str) -> Path:
    try:
        from specwhisper.model_store import resolve_model
    except ImportError:
        return Path(name)
    return resolve_model(name)


def run(args) -> dict:
    tok = WhisperTokenizer.from_model_dir(_resolve_model(args.model))
    data = Path(args.data)
    domains = ["car", "smarthome"]
    train = [line for d in domains for line in (data / "domain" / d / "train.txt").read_text().splitlines()]
    tests = {d: [tok.encode(" " + t) for t in _manifest_texts(data / "domain" / d / "test.jsonl")] for d in domains}
    t0 = time.perf_counter()
    tmap = build_token_map(train, tok, n=args.n, max_len=args.max_len, min_count=args.min_count, top_k=args.top_k)
    build_s = time.perf_counter() - t0
    cost = VerifyCost.default("cpu")
    window = WindowContext(prompt=tuple(tok.sot_sequence("en")), eot=tok.special.eot, max_new_tokens=224)
    tuning = {"min_cum": args.min_cum, "min_prob": args.min_prob, "backoff": args.backoff,
              "learned_weight": args.learned_weight, "recall_weight": args.recall_weight, "anchor_min": args.anchor_min, "gap_tail": args.gap_tail,
              "gap_backoff": args.gap_backoff}

    def run_one(make, utterances):
        return simulate(make(), utterances, window, make_policy(args.k, cost, args.row_floor), cost,
                        args.row_floor).row()

    results: dict = {"map": tmap.stats(), "build_s": build_s, "settings": {**vars(args), **tuning}, "rows": []}
    for d in domains:
        results["rows"].append({"scenario": f"held-out {d}", "drafter": "naive 3-gram",
                                **run_one(lambda: NaiveNgramDrafter(tmap), tests[d])})
        results["rows"].append({"scenario": f"held-out {d}", "drafter": "tokenmap",
                                **run_one(lambda: TokenMapDrafter(tmap, tok, **tuning), tests[d])})
        results["rows"].append({"scenario": f"held-out {d}", "drafter": "static + learn",
                                **run_one(lambda: TokenMapDrafter(tmap, tok, learn=True, **tuning), tests[d])})
    stream = [tests["car"][i] for i in zipf_stream(len(tests["car"]), args.stream_len, args.seed)]
    results["rows"].append({"scenario": "repeated car (Zipf)", "drafter": "naive 3-gram (static)",
                            **run_one(lambda: NaiveNgramDrafter(tmap), stream)})
    results["rows"].append({"scenario": "repeated car (Zipf)", "drafter": "tokenmap static only",
                            **run_one(lambda: TokenMapDrafter(tmap, tok, **tuning), stream)})
    results["rows"].append({"scenario": "repeated car (Zipf)", "drafter": "learn from empty",
                            **run_one(lambda: TokenMapDrafter(None, tok, learn=True, **tuning), stream)})
    results["rows"].append({"scenario": "repeated car (Zipf)", "drafter": "static + learn",
                            **run_one(lambda: TokenMapDrafter(tmap, tok, learn=True, **tuning), stream)})
    return results


def load_benchmark(args) -> dict:
    """Build a map from 30k generated transcripts (domain/generate.py) and time loading it."""
    import subprocess
    import tempfile

    from specwhisper.tokenmap import load_token_map

    tok = WhisperTokenizer.from_model_dir(_resolve_model(args.model))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(Path(args.data) / "domain" / "generate.py"), "--n-train", "30000",
                        "--n-test", "0", "--domains", "smarthome", "--out", tmp], check=True, capture_output=True)
        lines = (Path(tmp) / "smarthome" / "train.txt").read_text(encoding="utf-8").splitlines()
        t0 = time.perf_counter()
        tmap = build_token_map(lines, tok, n=args.n, max_len=args.max_len, min_count=args.min_count, top_k=args.top_k)
        build_s = time.perf_counter() - t0
        path = tmap.save(Path(tmp) / "30k.tmap")
        t0 = time.perf_counter()
        load_token_map(path, tok)
        first_s = time.perf_counter() - t0
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            load_token_map(path, tok)
            times.append(time.perf_counter() - t0)
    return {"transcripts": len(lines), "build_s": build_s, "bytes": tmap.stats()["bytes"], "nodes": tmap.n_nodes,
            "load_first_s": first_s, "load_s": min(times)}


def print_table(results: dict) -> None:
    m = results["map"]
    print(f"map: {m['transcripts']} transcripts, {m['nodes']} nodes, {m['bytes'] / 1e6:.2f} MB, "
          f"built in {results['build_s']:.2f} s (n={m['n']}, max_len={m['max_len']}, top_k={m['top_k']})")
    print(f"{'scenario':<22} {'drafter':<24} {'utt':>4} {'tokens':>6} {'calls':>6} {'Ar':>5} {'Al':>5} "
          f"{'tok/call':>8} {'cover':>5} {'whole':>5} {'K':>4} {'speedup':>7}")
    for r in results["rows"]:
        print(f"{r['scenario']:<22} {r['drafter']:<24} {r['utterances']:>4} {r['tokens']:>6} {r['verify_calls']:>6} "
              f"{r['Ar']:>5.2f} {r['Al']:>5.2f} {r['tokens_per_call']:>8.2f} {r['coverage']:>5.2f} "
              f"{r['whole']:>5} {r['mean_k']:>4.1f} {r['speedup']:>6.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tokenmap_sim", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="base", help="model name or CT2 directory (for its tokenizer)")
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"), help="the shared test corpus")
    p.add_argument("--k", default="auto", help="draft length: auto (the engine's adaptive policy) or a number")
    p.add_argument("--row-floor", type=int, default=2, help="rows every verify call carries (batch invariance)")
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--max-len", type=int, default=6)
    p.add_argument("--min-count", type=int, default=2)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--min-cum", type=float, default=0.1)
    p.add_argument("--min-prob", type=float, default=0.05)
    p.add_argument("--backoff", type=float, default=2.0)
    p.add_argument("--learned-weight", type=float, default=1.0)
    p.add_argument("--recall-weight", type=float, default=64.0)
    p.add_argument("--anchor-min", type=int, default=30)
    p.add_argument("--gap-tail", type=int, default=2)
    p.add_argument("--gap-backoff", type=float, default=1.0)
    p.add_argument("--stream-len", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--load-30k", action="store_true",
                   help="instead: build a map from 30k generated transcripts and time loading it")
    args = p.parse_args(argv)
    if args.load_30k:
        r = load_benchmark(args)
        print(f"{r['transcripts']} transcripts -> {r['nodes']} nodes, {r['bytes'] / 1e6:.1f} MB, built in "
              f"{r['build_s']:.1f} s; load {r['load_s'] * 1000:.1f} ms (first load, fingerprinting the "
              f"tokenizer: {r['load_first_s'] * 1000:.1f} ms)")
        return 0
    results = run(args)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
