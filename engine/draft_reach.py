"""One round's drafts: the policy's K, or further where the drafter is sure of more.

The draft-length policy learns one K from every round, but a token map recalling a command said
before knows the whole of it: on a 2-core AMD EPYC without AVX-512 a repeated-command stream was
drafted in 4-row calls (K 3) with 95 % of drafts accepted, three calls where one wider call was
cheaper. A drafter that stops itself where unsure and gives each token's confidence
(``confident_reach``) is asked as far as the widest call priced, and the policy keeps the part
whose call pays (``AdaptiveDraftLength.confident_length``). Which tokens are verified never
changes the text, only what the round costs.
"""

from __future__ import annotations

from collections.abc import Sequence


def propose(drafter, policy, tokens: Sequence[int], k: int, room: int) -> list[int]:
    """Up to ``k`` drafts from ``drafter``, or more where drafter and policy both allow it."""
    if k <= 0:
        return []
    reach = policy.reach(room) if hasattr(policy, "confident_length") and hasattr(drafter, "keep") else k
    if reach <= k:
        return list(drafter.propose(tokens, k))[:k]
    drafts = list(drafter.propose(tokens, k, reach))[:reach]
    confidence = getattr(drafter, "last_confidence", None)
    if len(drafts) <= k or not confidence or len(confidence) < len(drafts):
        n = min(len(drafts), k)
    else:
        n = policy.confident_length(k, confidence[:len(drafts)])
    drafter.keep(n)
    return drafts[:n]
