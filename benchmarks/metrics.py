"""Scoring and aggregation: WER with Whisper's normaliser, medians of repeats, per-set summaries.

Pure functions over plain dicts (one *record* per clip x system x repeat), so the tables and
plots can be rebuilt from a results JSON without rerunning anything.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache

TIMING_KEYS = ("load_s", "features_s", "encoder_s", "decoder_s", "total_s")
NUMERICS_REFERENCE = {"single-row": "greedy-single-row", "batch-invariant": "greedy-batch-invariant"}
CHAR_LANGS = {"zh", "ja", "th", "lo", "my", "yue"}  # no spaces between words: score characters (CER)


@lru_cache(maxsize=2)
def _normaliser(english: bool):
    try:
        if english:
            from whisper_normalizer.english import EnglishTextNormalizer

            return EnglishTextNormalizer()
        from whisper_normalizer.basic import BasicTextNormalizer

        return BasicTextNormalizer()
    except ImportError:
        return None


def normalise(text: str, language: str = "en") -> str:
    """Whisper's text normaliser (English one for en), falling back to lowercase + no punctuation."""
    fn = _normaliser(language == "en")
    if fn is not None:
        return " ".join(fn(text).split())
    import re

    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def _units(text: str, language: str) -> list[str]:
    """Scored units: characters for CHAR_LANGS, else words with every run of digits split into
    digits. Whisper's normaliser joins spoken digits ("three three seven ...") into one number
    while a transcript may write them apart ("337-", "3, 3, 7"): on the long-form file's digit
    strings every system scored 100 % WER (one reference number against a word per digit)."""
    norm = normalise(text, language)
    if language in CHAR_LANGS:
        return [c for c in norm if not c.isspace()]
    units: list[str] = []
    for word in norm.split():
        units.extend(word if word.isdigit() else [word])
    return units


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over tokens (jiwer when available, else a small DP)."""
    if not ref:
        return len(hyp)
    if not hyp:
        return len(ref)
    try:
        import jiwer

        out = jiwer.process_words(" ".join(ref), " ".join(hyp))
        return int(out.substitutions + out.deletions + out.insertions)
    except ImportError:
        prev = list(range(len(hyp) + 1))
        for i, r in enumerate(ref, 1):
            cur = [i]
            for j, h in enumerate(hyp, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
            prev = cur
        return prev[-1]


def clip_errors(hypothesis: str, references: Iterable[str], language: str = "en") -> tuple[int, int]:
    """(errors, reference length) against the closest of the accepted references."""
    best: tuple[int, int] | None = None
    hyp = _units(hypothesis, language)
    for ref_text in references:
        ref = _units(ref_text, language)
        err = edit_distance(ref, hyp)
        if best is None or err * max(best[1], 1) < best[0] * max(len(ref), 1):
            best = (err, len(ref))
    return best if best is not None else (len(hyp), 0)


def sign_test(better: int, worse: int) -> float:
    """Two-sided sign test: the chance of a split at least this uneven between clips a change made
    better and worse, were either equally likely (ties left out). Why: on ~1000 command words a
    few clips decide a WER difference; this says whether it is more than a coin would give."""
    n, k = better + worse, min(better, worse)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def wer(pairs: Iterable[tuple[str, Iterable[str], str]]) -> float | None:
    """Corpus error rate: summed edits / summed reference length, over (hyp, refs, language)."""
    errors = total = 0
    for hyp, refs, lang in pairs:
        e, n = clip_errors(hyp, refs, lang)
        errors += e
        total += n
    return errors / total if total else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def clip_medians(records: list[dict]) -> dict[tuple[str, str, str], dict]:
    """One row per (set, clip, system): medians of the timed repeats, output of the first repeat."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["set"], r["clip"], r["system"])].append(r)
    out = {}
    for key, runs in groups.items():
        ok = [r for r in runs if r.get("ok")]
        if not ok:
            out[key] = {"ok": False, "skipped": all(r.get("skipped") for r in runs),
                        "error": runs[-1].get("error", "failed"),
                        **{k: runs[0].get(k) for k in ("set", "clip", "system", "duration_s")}}
            continue
        first = ok[0]
        row = {k: first.get(k) for k in ("set", "clip", "system", "duration_s", "language", "text", "tokens",
                                         "stats", "numerics", "refs", "windows", "window_numerics",
                                         "window_reasons", "window_tokens", "window_seeks", "window_speedup")}
        row["ok"] = True
        row["repeats"] = len(ok)
        row["deterministic"] = all(r.get("tokens") == first.get("tokens") for r in ok)
        row["timings"] = {k: _median([r["timings"][k] for r in ok if r["timings"].get(k) is not None])
                          for k in TIMING_KEYS}
        row["wall_s"] = _median([r["wall_s"] for r in ok if r.get("wall_s") is not None])
        row["rss_mb"] = max((r.get("rss_mb") or 0.0) for r in ok)
        row["peak_rss_mb"] = max((r.get("peak_rss_mb") or 0.0) for r in ok)
        out[key] = row
    return out


def summarise(records: list[dict], *, reference_for: dict[str, str], baseline: str | None,
              decoder_baseline: str | None) -> dict[str, dict[str, dict]]:
    """Per set, per system: WER, identity with greedy, times, split, ms/token, Ar, Al, mean K, RSS.

    ``reference_for[system]`` names the greedy system whose tokens count as "identical"; speedups
    compare summed median end-to-end times (``baseline``) and decoder times (``decoder_baseline``)
    over the clips where both systems succeeded.
    """
    rows = clip_medians(records)
    by_set: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for (s, _clip, system), row in rows.items():
        by_set[s][system].append(row)
    summary: dict[str, dict[str, dict]] = {}
    for s, systems in by_set.items():
        index = {(row["clip"], sysname): row for sysname, lst in systems.items() for row in lst}
        summary[s] = {}
        for system, lst in systems.items():
            summary[s][system] = _summarise_one(system, lst, index, reference_for.get(system), baseline,
                                                decoder_baseline)
    return summary


def _summarise_one(system: str, rows: list[dict], index: dict, reference: str | None, baseline: str | None,
                   decoder_baseline: str | None) -> dict:
    ok = [r for r in rows if r.get("ok")]
    skipped = sum(1 for r in rows if not r.get("ok") and r.get("skipped"))
    out: dict = {"clips": len(rows), "failed": len(rows) - len(ok) - skipped, "skipped": skipped}
    if not ok:
        out["errors"] = sorted({str(r.get("error")) for r in rows})[:3]
        return out
    out["wer"] = wer((r["text"] or "", r.get("refs") or [""], r.get("language") or "en") for r in ok)
    tokens = sum(len(r.get("tokens") or []) for r in ok)
    audio_s = sum(r.get("duration_s") or 0.0 for r in ok)
    t = {k: sum((r["timings"].get(k) or 0.0) for r in ok) for k in ("features_s", "encoder_s", "decoder_s",
                                                                       "total_s")}
    windows = sum(r.get("windows") or 1 for r in ok)
    out.update({"tokens": tokens, "audio_s": audio_s, "windows": windows, **t,
                "encoder_ms_per_window": 1000 * t["encoder_s"] / windows if windows else None,
                "other_s": max(t["total_s"] - t["features_s"] - t["encoder_s"] - t["decoder_s"], 0.0),
                "rtf": t["total_s"] / audio_s if audio_s else None,
                "decoder_ms_per_token": 1000 * t["decoder_s"] / tokens if tokens else None,
                "load_s": _median([r["timings"]["load_s"] for r in ok if r["timings"].get("load_s") is not None]),
                "rss_mb": max(r.get("rss_mb") or 0.0 for r in ok),
                "peak_rss_mb": max(r.get("peak_rss_mb") or 0.0 for r in ok),
                "deterministic": all(r.get("deterministic", True) for r in ok)})
    if reference:
        compared, same = [], []
        for r in ok:
            identical = _identical(r, system, reference, index)
            if identical is not None:
                compared.append(r)
                if identical:
                    same.append(r)
        out["identical_to"] = reference
        out["identical"] = len(same)
        out["identical_of"] = len(compared)
        out["different_clips"] = sorted({r["clip"] for r in compared} - {r["clip"] for r in same})[:20]
    for key, base, field in (("speedup", baseline, "total_s"), ("decoder_speedup", decoder_baseline, "decoder_s")):
        if not base:
            continue
        pairs = [(r, index.get((r["clip"], base))) for r in ok]
        pairs = [(r, b) for r, b in pairs if b and b.get("ok")]
        mine = sum(r["timings"][field] or 0.0 for r, _ in pairs)
        theirs = sum(b["timings"][field] or 0.0 for _, b in pairs)
        out[key] = theirs / mine if mine > 0 and pairs else None
        out[f"{key}_vs"] = base
    stats = [r.get("stats") or {} for r in ok]
    drafted = sum(s.get("drafted", 0) for s in stats)
    accepted = sum(s.get("accepted", 0) for s in stats)
    calls = sum(s.get("verify_calls", 0) for s in stats)
    k_sum = sum(s.get("k_sum", 0) for s in stats)
    hist: dict[str, int] = defaultdict(int)
    for s in stats:
        for n, c in (s.get("accepted_by_len") or {}).items():
            hist[str(n)] += int(c)
    out.update({"drafted": drafted, "accepted": accepted, "verify_calls": calls,
                "Ar": accepted / drafted if drafted else None, "Al": accepted / calls if calls else None,
                "mean_k": k_sum / calls if calls else None,
                "accepted_by_len": dict(sorted(hist.items(), key=lambda kv: int(kv[0])))})
    out["numerics"] = sorted({str(r.get("numerics")) for r in ok if r.get("numerics")})
    # the policy's gap: expected vs delivered speedup of the windows it speculated (mean over windows)
    # (runs that drafted nothing, e.g. greedy-batch-invariant, speculated nothing: left out)
    pairs = [(p, d) for r in ok if (r.get("stats") or {}).get("drafted")
             for numerics, p, d in r.get("window_speedup") or []
             if numerics == "batch-invariant" and p is not None and d is not None]
    out["speculated_windows"] = len(pairs)
    out["predicted_speedup"] = sum(p for p, _ in pairs) / len(pairs) if pairs else None
    out["realised_speedup"] = sum(d for _, d in pairs) / len(pairs) if pairs else None
    # where nothing was drafted, why (the windows' most common numerics reason: a draft model the
    # cost model refused, a policy that chose single-row; "drafted 0" said nothing of it)
    reasons = Counter(reason for r in ok for reason in r.get("window_reasons") or [])
    out["undrafted_reason"] = reasons.most_common(1)[0][0] if reasons and not out.get("drafted") else None
    return out


def _reference(row: dict, system: str, default: str, index: dict) -> str:
    """The greedy run in the numerics this clip was actually decoded in (numerics=auto picks per clip)."""
    by_numerics = NUMERICS_REFERENCE.get(str(row.get("numerics")))
    if by_numerics and by_numerics != system and (row["clip"], by_numerics) in index:
        return by_numerics
    return default


def _identical(row: dict, system: str, default: str, index: dict) -> bool | None:
    """Tokens equal to greedy's in the numerics they were decoded in (None: no reference ran).

    A clip whose windows were decoded in different numerics (numerics=auto decides per window) is
    checked window by window against the greedy run of each window's numerics, at the window that
    starts at the same frame (windows are decoded independently: no conditioning on earlier text in
    the benchmark). Where an earlier window ended elsewhere than greedy's, a window has no
    counterpart in that run and the clip cannot be checked (None), unless a compared window differs."""
    if row.get("numerics") == "mixed":
        if not (row.get("window_numerics") and row.get("window_seeks")):
            return None  # a record without per-window tokens and starts cannot be checked
        unmatched = False
        for numerics, seek, tokens in zip(row["window_numerics"], row["window_seeks"], row["window_tokens"]):
            if numerics == "skipped":
                continue
            ref_row = index.get((row["clip"], NUMERICS_REFERENCE.get(numerics, "")))
            if not (ref_row and ref_row.get("ok") and ref_row.get("window_seeks")):
                return None
            ref_tokens = dict(zip(ref_row["window_seeks"], ref_row["window_tokens"])).get(seek)
            if ref_tokens is None:
                unmatched = True
            elif tokens != ref_tokens:
                return False
        return None if unmatched else True
    reference = _reference(row, system, default, index)
    ref_row = index.get((row["clip"], reference))
    if not (ref_row and ref_row.get("ok")):
        return None
    ref_numerics = ref_row.get("numerics") or {v: k for k, v in NUMERICS_REFERENCE.items()}.get(reference)
    if system not in NUMERICS_REFERENCE.values() and row.get("numerics") and ref_numerics \
            and row["numerics"] != ref_numerics:
        return None  # greedy in other numerics (its own did not run): says nothing about exactness
    return _text_tokens(row) == _text_tokens(ref_row)


def _text_tokens(row: dict) -> list[int]:
    """Records hold text tokens only (specials such as EOT and timestamps removed by the runner)."""
    return list(row.get("tokens") or [])
