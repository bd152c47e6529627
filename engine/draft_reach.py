"""One round's drafts: the policy's K, or further where the drafter is sure of more.

The draft-length policy learns one K from every round, but a token map recalling a command said
before knows the whole of it: on a 2-core AMD EPYC without AVX-512 a repeated-command stream was
drafted in 4-row calls (K 3) with 95 % of drafts accepted, three calls where one wider call was
cheaper. A drafter that stops itself where unsure and gives each token's confidence
(``confident_reach``) is asked as far as the widest call priced, and the policy keeps the part
whose call pays (``AdaptiveDraftLength.confident_length``), each token valued at the acceptance
measured for drafts rated as it is (``ConfidenceCalibration``: on commands never heard the map's
n-gram confidence was too high for wide calls, and a plain step paid more). Which tokens are
verified never changes the text, only what the round costs.
"""

from __future__ import annotations

from collections.abc import Sequence


def propose(drafter, policy, tokens: Sequence[int], k: int, room: int) -> list[int]:
    """Up to ``k`` drafts from ``drafter``; from one that gives its confidence, as many as that
    confidence pays for (none to the widest call priced)."""
    if k <= 0:
        return []
    if not (hasattr(policy, "confident_length") and hasattr(drafter, "keep")):
        return list(drafter.propose(tokens, k))[:k]
    reach = max(k, policy.reach(room))
    drafts = list(drafter.propose(tokens, k, reach))[:reach]
    confidence = _ratings(getattr(drafter, "last_confidence", None), len(drafts))
    # another drafter of the chain proposed, or a drafter of one's own rated its drafts wrongly: K
    n = min(len(drafts), k) if confidence is None else policy.confident_length(k, confidence)
    drafter.keep(n)
    return drafts[:n]


def _ratings(confidence, n: int) -> list[float] | None:
    """The first ``n`` confidences as probabilities (NaN as 0), or None where there are fewer or
    some is not a number."""
    if confidence is None:
        return None
    try:
        rated = [float(c) for c in list(confidence)[:n]]
    except (TypeError, ValueError):
        return None
    if len(rated) < n:
        return None
    return [min(1.0, max(0.0, c)) if c == c else 0.0 for c in rated]
