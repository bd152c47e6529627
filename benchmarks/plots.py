"""PNG plots (matplotlib, headless): speedup by system and set, decoder time vs tokens,
accepted-length histogram, and the verify-cost curve. Each is written atomically."""

from __future__ import annotations

import io
import os
from pathlib import Path

from specwhisper.io_utils import atomic_write_bytes

from .metrics import clip_medians


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike[str]) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def plot_speedup(summary: dict[str, dict[str, dict]], order: list[str], path: Path, baseline: str | None) -> Path:
    plt = _plt()
    sets = list(summary)
    systems = [s for s in order if any(summary[x].get(s, {}).get("speedup") for x in sets)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(systems) + 2), 4.2))
    width = 0.8 / max(len(sets), 1)
    for i, set_name in enumerate(sets):
        values = [summary[set_name].get(s, {}).get("speedup") or 0.0 for s in systems]
        ax.bar([j + i * width for j in range(len(systems))], values, width, label=set_name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(sets) - 1) / 2 for j in range(len(systems))])
    ax.set_xticklabels(systems, rotation=35, ha="right")
    ax.set_ylabel(f"end-to-end speedup vs {baseline}")
    ax.set_title("End-to-end speedup by system and set (higher is faster)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_decoder_vs_tokens(records: list[dict], order: list[str], path: Path) -> Path:
    plt = _plt()
    rows = [r for r in clip_medians(records).values() if r.get("ok")]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colours = plt.get_cmap("tab20").colors
    markers = "os^Dv<>ph*"
    for i, system in enumerate(order):
        pts = [(max(len(r.get("tokens") or []), 1), max(1000 * (r["timings"].get("decoder_s") or 0.0), 0.1))
               for r in rows if r["system"] == system]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, label=system, alpha=0.75,
                       color=colours[(2 * i) % 20 + (i // 10) % 2], marker=markers[i % len(markers)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens emitted per clip (log)")
    ax.set_ylabel("decoder time per clip, ms (median of repeats, log)")
    ax.set_title("Decoder time vs tokens")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_acceptance_hist(summary: dict[str, dict[str, dict]], order: list[str], path: Path) -> Path | None:
    plt = _plt()
    totals: dict[str, dict[int, int]] = {}
    for set_rows in summary.values():
        for system, row in set_rows.items():
            for n, c in (row.get("accepted_by_len") or {}).items():
                totals.setdefault(system, {}).setdefault(int(n), 0)
                totals[system][int(n)] += int(c)
    systems = [s for s in order if totals.get(s)]
    if not systems:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        hist = totals[system]
        calls = sum(hist.values())
        xs = sorted(hist)
        offset = (i - (len(systems) - 1) / 2) * width  # the group centred on its count, not to its right
        ax.bar([x + offset for x in xs], [hist[x] / calls for x in xs], width, label=f"{system} ({calls} calls)")
    ax.set_xticks(sorted({n for system in systems for n in totals[system]}))
    ax.set_xlabel("draft tokens accepted per verify call")
    ax.set_ylabel("fraction of verify calls")
    ax.set_title("Accepted length per verify call")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_all(results: dict, out: Path) -> list[Path]:
    """Every run plot that has data; returns the files written."""
    meta = results.get("meta", {})
    order = meta.get("systems", [])
    summary = results.get("summary", {})
    written = []
    if summary:
        written.append(plot_speedup(summary, order, out / "speedup.png", meta.get("baseline")))
        written.append(plot_decoder_vs_tokens(results.get("records", []), order, out / "decoder_vs_tokens.png"))
        hist = plot_acceptance_hist(summary, order, out / "acceptance_hist.png")
        if hist:
            written.append(hist)
    return written


def plot_verify_cost(curve: dict, path: Path) -> Path:
    plt = _plt()
    ns = sorted(int(n) for n in curve["batch_ms"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(ns, [curve["batch_ms"][str(n)] for n in ns], marker="o", label="one batched call of n rows")
    ax.plot(ns, [n * curve["step_ms"] for n in ns], linestyle="--", label="n single-row steps")
    ax.set_xlabel("tokens verified (n)")
    ax.set_ylabel("ms")
    ax.set_title(f"Verify cost: {curve['model']} {curve['compute_type']} {curve['device']} "
                 f"{curve['threads']} threads")
    ax.legend()
    ax2 = ax.twinx()
    ax2.plot(ns, [curve["batch_ms"][str(n)] / curve["step_ms"] for n in ns], color="gray", alpha=0.4)
    ax2.set_ylabel("batched / one step", color="gray")
    return _save(fig, path)
