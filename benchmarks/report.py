"""Writers: the results JSON and the markdown tables (both written atomically, rebuilt from the JSON)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specwhisper.io_utils import atomic_write_text

COLUMNS = (
    ("system", "system"), ("clips", "clips"), ("numerics", "numerics"), ("wer", "WER %"), ("identical", "= greedy"),
    ("total_s", "e2e s"), ("rtf", "RTF"), ("speedup", "e2e speedup"), ("features_s", "features s"),
    ("encoder_s", "encoder s"), ("encoder_ms_per_window", "enc ms/win"), ("decoder_s", "decoder s"),
    ("other_s", "other s"), ("decoder_ms_per_token", "dec ms/tok"), ("decoder_speedup", "dec speedup"),
    ("Ar", "Ar"), ("Al", "Al"), ("mean_k", "mean K"), ("rss_mb", "RSS MB"), ("load_s", "load s"),
)

NUMERICS_SHORT = {"single-row": "SR", "batch-invariant": "BI", "mixed": "mixed", "none": "–"}


def write_json(path: str | os.PathLike[str], data: dict) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False, default=_default) + "\n")


def _default(obj: object) -> object:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()  # type: ignore[union-attr]
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def fmt(key: str, value: object) -> str:
    """One table cell: percentages, seconds, ratios, counts each in their own precision."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if key == "wer":
        return f"{100 * float(value):.1f}"  # type: ignore[arg-type]
    if key in ("speedup", "decoder_speedup"):
        return f"{float(value):.2f}x"  # type: ignore[arg-type]
    if key in ("clips", "tokens", "rss_mb", "encoder_ms_per_window"):
        return f"{float(value):.0f}"  # type: ignore[arg-type]
    if key in ("rtf", "Ar", "Al", "mean_k", "decoder_ms_per_token"):
        return f"{float(value):.2f}" if key != "rtf" else f"{float(value):.3f}"  # type: ignore[arg-type]
    return f"{float(value):.2f}"  # type: ignore[arg-type]


def _cell(key: str, row: dict) -> str:
    if key == "identical":
        if row.get("identical_of") is None:
            return "–"
        return f"{row['identical']}/{row['identical_of']}"
    if key == "numerics":
        return ",".join(NUMERICS_SHORT.get(n, n) for n in row.get("numerics") or []) or "–"
    if key == "clips":
        n = row.get("clips", 0) - row.get("failed", 0) - row.get("skipped", 0)
        extra = f" ({row['failed']} failed)" if row.get("failed") else ""
        return f"{n}{extra}"
    return fmt(key, row.get(key))


def set_table(summary: dict[str, dict], order: list[str]) -> str:
    head = "| " + " | ".join(label for _, label in COLUMNS) + " |"
    sep = "|" + "|".join("---" if k == "system" else "---:" for k, _ in COLUMNS) + "|"
    lines = [head, sep]
    for system in order:
        row = summary.get(system)
        if row is None:
            continue
        cells = [system] + [_cell(k, row) for k, _ in COLUMNS[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_matrix(summary: dict[str, dict[str, dict]], order: list[str], key: str = "speedup") -> str:
    sets = list(summary)
    lines = ["| system | " + " | ".join(sets) + " |", "|---|" + "---:|" * len(sets)]
    for system in order:
        if not any(system in summary[s] for s in sets):
            continue
        cells = [fmt(key, summary[s].get(system, {}).get(key)) for s in sets]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def encoder_note(summary: dict[str, dict[str, dict]]) -> str | None:
    """Encoder time per 30 s window pooled over all sets: our engine's (the encoder its runs chose,
    ``greedy-single-row``), upstream CTranslate2's (``ct2-greedy``, faster-whisper's) and the fork's
    CTranslate2 encoder (``fork-generate``), those of them that ran (None if fewer than two)."""
    def pooled(system: str) -> float | None:
        rows = [summary[s][system] for s in summary if summary[s].get(system, {}).get("windows")]
        windows = sum(r["windows"] for r in rows)
        return 1000 * sum(r["encoder_s"] for r in rows) / windows if windows else None

    labels = {"greedy-single-row": "ours", "ct2-greedy": "upstream CTranslate2 (faster-whisper's)",
              "fork-generate": "the fork's CTranslate2"}
    times = {label: pooled(system) for system, label in labels.items()}
    times = {label: ms for label, ms in times.items() if ms is not None}
    if len(times) < 2:
        return None
    said = ", ".join(f"{label} {ms:.0f} ms" for label, ms in times.items())
    return (f"Encoder per 30 s window on this machine: {said} (ours: the encoder `--encoder` chose, see each "
            "record's `encoder`). End-to-end time (e2e) is what users feel: judge systems by the e2e columns.")


def policy_note(rows: dict[str, dict], order: list[str]) -> str | None:
    """Per system: the speedup the policy expected of the windows it speculated, beside what their
    calls delivered (both in 1-row steps priced by the policy's curve), so that the gap is visible."""
    parts = [f"`{system}` expected {rows[system]['predicted_speedup']:.2f}x, delivered "
             f"{rows[system]['realised_speedup']:.2f}x over {rows[system]['speculated_windows']} windows"
             for system in order if rows.get(system, {}).get("speculated_windows")]
    return ("Policy, speculated windows (modelled: each window's decoder calls priced in 1-row steps by the "
            "measured call-cost curve, not timed): " + "; ".join(parts) + "." if parts else None)


def markdown_report(results: dict) -> str:
    meta = results.get("meta", {})
    summary: dict[str, dict[str, dict]] = results.get("summary", {})
    order: list[str] = meta.get("systems", [])
    cfg = meta.get("config", {})
    m = meta.get("machine", {})
    lines = [f"# Benchmark results ({meta.get('status', 'complete')})", "",
             f"Command: `{meta.get('command', '')}`", "",
             f"Started {meta.get('started', '?')}, updated {meta.get('updated', '?')}. "
             f"Model `{cfg.get('model')}`, {cfg.get('compute_type')}, {cfg.get('device')}, "
             f"{cfg.get('threads')} threads, {meta.get('repeat')} timed repeats per clip"
             + (f", clip limits per set {meta['limit']}" if meta.get("limit") else "") + ".", "",
             f"Machine: {m.get('cpu', '?')}, {m.get('cores_usable', '?')} usable cores, "
             f"{m.get('memory_gb', '?')} GB, {m.get('os', '?')}, Python {m.get('python', '?')}.",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in {**meta.get("versions", {}),
                                                              **meta.get("peer_versions", {})}.items()), "",
             "How to read: times are per-clip medians of the timed repeats, summed over the set's clips. "
             + meta.get("warmup", "") + " Systems run interleaved per clip (the order rotates each repeat). "
             "`e2e s` is end-to-end wall time of a transcription (features + encoder + decoder + other), "
             "what a user waits for; `e2e speedup` = baseline e2e / system e2e "
             f"(baseline `{meta.get('baseline')}`); `dec speedup` = decoder time of "
             f"`{meta.get('decoder_baseline')}` / the system's. `= greedy`: clips whose text tokens equal "
             "greedy's in the same numerics (spec-* drafters vs greedy-batch-invariant, the rest vs "
             "greedy-single-row; a clip whose numerics' greedy did not run is left out of the count, "
             "unchecked). Ar = accepted/drafted, Al = accepted drafts per verify call, mean K = "
             "drafts per verify call. numerics: what our engine decoded in (SR single-row, BI batch-invariant). RSS: resident memory of the process that ran the system, sampled after "
             "its run (in-process systems share one process and its models; peers run in their own).", ""]
    note = encoder_note(summary)
    if note:
        lines += [f"**{note}**", ""]
    if len(summary) > 1:
        lines += ["## End-to-end speedup by system and set", "", speedup_matrix(summary, order), ""]
    for set_name, rows in summary.items():
        info = results.get("sets", {}).get(set_name, {})
        lines += [f"## {set_name}", "", f"{info.get('n_clips', '?')} clips, "
                  f"{info.get('audio_s', 0.0):.1f} s of audio."
                  + (f" Token map: {info['tokenmap']}." if info.get("tokenmap") else ""), "",
                  set_table(rows, order), ""]
        gap = policy_note(rows, order)
        if gap:
            lines += [gap, ""]
        undrafted = [f"`{system}`: {rows[system]['undrafted_reason']}" for system in order
                     if system.startswith("spec-") and rows.get(system, {}).get("undrafted_reason")]
        if undrafted:
            lines += ["Drafted nothing (the windows' most common reason): " + "; ".join(undrafted) + ".", ""]
        unavailable = info.get("unavailable", {})
        if unavailable:
            lines += ["Not run here: " + "; ".join(f"`{k}`: {v}" for k, v in unavailable.items()), ""]
        failures = info.get("failures", [])
        if failures:
            lines += ["Failures (the run went on):"]
            lines += [f"- `{f['system']}` on `{f['clip']}` (repeat {f.get('repeat')}): {f['error']}"
                      for f in failures[:20]]
            lines += [f"- ... and {len(failures) - 20} more"] if len(failures) > 20 else []
            lines += [""]
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(path: str | os.PathLike[str], results: dict) -> Path:
    return atomic_write_text(path, markdown_report(results))
