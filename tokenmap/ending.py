"""Does a transcript end here? The token map's counts of end-of-text after the last few tokens.

Every transcript a map is built from (and every utterance it learns) is stored as
``[BEGIN, t1 .. tm, EOT]``, so the trie knows, for each context of up to ``n`` tokens, how often
what followed was the end of the command. A command recogniser can end an utterance after a
short silence when its text ends the way the domain's commands end ("... to 21 degrees."), and
wait for the long silence when it stops where commands go on ("Set the thermostat to"). That
is semantic endpointing from the same counts that draft tokens: no second model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

MIN_CONTEXT_COUNT = 3  # a context seen fewer times says too little; a shorter one is asked instead
MIN_CONTEXT_TOKENS = 2  # never judged on one token: "lights" ends "Turn on the lights" and begins "lights to 50%"


class CountTrie(Protocol):
    def child(self, node: int, token: int) -> int: ...

    def count(self, node: int) -> int: ...

    def children(self, node: int) -> list[tuple[int, int, int]]: ...


def end_probability(maps: Sequence[CountTrie], tokens: Sequence[int], eot: int, n: int,
                    is_punctuation: Callable[[int], bool], min_count: int = MIN_CONTEXT_COUNT) -> float | None:
    """How often the command ended (end-of-text, or punctuation then end-of-text) after the longest
    context of ``tokens``' last words, up to ``n`` tokens and at least ``MIN_CONTEXT_TOKENS``, that
    the maps together saw at least ``min_count`` times; None where none was (nothing known: the
    caller waits as it would without a map). Trailing punctuation is not asked about: Whisper ends a
    cut-off command with a full stop as readily as a whole one."""
    text = [t for t in tokens if t < eot]
    while text and is_punctuation(text[-1]):
        text.pop()
    for length in range(min(n, len(text)), MIN_CONTEXT_TOKENS - 1, -1):
        seen = ended = 0
        for trie in maps:
            node = _find(trie, text[-length:])
            if node >= 0:
                seen += trie.count(node)
                ended += _ends_below(trie, node, eot, is_punctuation)
        if seen >= min_count:
            return ended / seen
    return None


def _ends_below(trie: CountTrie, node: int, eot: int, is_punctuation: Callable[[int], bool]) -> int:
    """Occurrences of ``node``'s context followed by end-of-text, directly or after punctuation."""
    ended = 0
    for token, count, child in trie.children(node):
        if token == eot:
            ended += count
        elif is_punctuation(token):
            end = trie.child(child, eot)
            ended += trie.count(end) if end >= 0 else 0
    return ended


def _find(trie: CountTrie, path: Sequence[int]) -> int:
    node = 0
    for token in path:
        node = trie.child(node, token)
        if node < 0:
            return -1
    return node
