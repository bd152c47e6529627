"""Would drafts pay inside a lockstep batch (issue 19, item 6)? The invariant decoder's measured
call prices by rows, and what prompt lookup drafts on windows decoded as the batched pipeline
decodes them (no previous text, no timestamps): each slot of a batch of ``b`` windows that drafts
one token turns a ``b``-row call into a ``2b``-row one, so drafting pays only where a slot's first
draft is accepted more often than ``c(2b) / c(b) - 1``.

    python -m benchmarks.studies.lockstep_drafts [FILES...] [--out results/lockstep-drafts.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.data import shared_data_root
from benchmarks.machine import kernel_class


def study(files: list[Path], batches: tuple[int, ...] = (1, 4, 8)) -> dict:
    from specwhisper import WhisperEngine

    with WhisperEngine("base", threads=2) as engine:
        cost, ceiling = engine.verify_cost, engine.row_ceiling
        rounds = proposed = accepted = 0
        for path in files:
            stats = engine.transcribe(path, language="en", numerics="batch-invariant", timestamps="off",
                                      condition_on_previous_text=False).stats
            lookup = stats["by_drafter"].get("prompt_lookup", {"drafted": 0, "accepted": 0, "rounds": 0})
            rounds += stats["verify_calls"]
            proposed += lookup["rounds"]
            accepted += lookup["accepted"]
    first_draft = {"rounds": rounds, "rounds_with_a_draft": proposed, "accepted_drafts": accepted,
                   "accepted_per_round": accepted / rounds if rounds else None}
    break_even = {b: cost(2 * b) / cost(b) - 1 for b in batches if 2 * b <= (ceiling or 0)}
    return {"machine": kernel_class(), "prices": dict(sorted(cost.by_rows.items())), "row_ceiling": ceiling,
            "first_draft": first_draft, "break_even_acceptance": break_even}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files = args.files or sorted((shared_data_root() / "longform").glob("*.flac"))
    report = study(files)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
