"""Which tokens of a live pass are final: LocalAgreement-2 and the loop guards (``live``).

Pure functions of token lists, kept apart from the stream so that the commit rule can be read
and tested without a model: a pass commits the prefix it shares with the pass before, cut back
to a word boundary; a decoder that loops where speech is cut off at the end of a buffer
("seven, seven, seven, ...") is cut after the first copy, so that two looping passes cannot
agree on the loop and commit it.
"""

from __future__ import annotations

from collections.abc import Callable


def agreed_length(current: list[int], previous: list[int] | None, start: int, timestamp_begin: int,
                  word_start: Callable[[int], bool]) -> int:
    """How many tokens of ``current`` to commit: the prefix it shares with ``previous`` (any two
    timestamps count as equal), cut back to where both passes start a new word (or end), and at
    least ``start`` (the forced prefix)."""
    if previous is None:
        return start
    n = start
    while n < len(current) and n < len(previous) and (
            current[n] == previous[n] or (current[n] >= timestamp_begin and previous[n] >= timestamp_begin)):
        n += 1
    while n > start and not all(word_start(seq[n]) for seq in (current, previous) if n < len(seq)):
        n -= 1
    return n


def cut_repetition(tokens: list[int], min_copies: int = 3, max_period: int = 16) -> list[int]:
    """``tokens`` up to the end of the first copy of a block that repeats (at least ``min_copies``
    times) to the end: the tail of a decoder that loops ("seven, seven, seven, ..."); unchanged
    where the end does not repeat."""
    keep = len(tokens)
    for period in range(1, max_period + 1):
        i = len(tokens) - period
        while i > 0 and tokens[i - 1] == tokens[i - 1 + period]:
            i -= 1
        if len(tokens) - i >= min_copies * period:
            keep = min(keep, i + period)
    return tokens[:keep]


def inner_loop(tokens: list[int], begin: int, min_period: int = 4, max_period: int = 16) -> int | None:
    """Where a block of ``min_period`` tokens or more that runs three times in a row, its third copy
    ending at or after ``begin``, should have stopped (after its second copy); None where there is
    none. A loop followed by more text: base on an AVX2-only EPYC wrote "three, four, three, four,
    three, four," into a digit list and went on with the next sentence, which diluted the pass's
    compression ratio to 1.3, and ended nowhere near the pass's end, where ``creeping_loop`` looks;
    two passes agreed on it (8 words inserted into 53 s). Blocks of 4 tokens and more only: digit
    lists repeat a word ("one, one, one"), seldom a pair three times."""
    cut = None
    for period in range(min_period, max_period + 1):
        run = 0  # tokens so far that equal the one a period before
        for j in range(period, len(tokens)):
            run = run + 1 if tokens[j] == tokens[j - period] else 0
            if run >= 2 * period and j >= begin:  # three copies end at j
                end_of_two = j - run + 1 + period
                cut = end_of_two if cut is None else min(cut, end_of_two)
                break
    return cut


def creeping_loop(tokens: list[int], max_period: int = 16) -> int | None:
    """Where a decoder that repeats a block to the end of ``tokens`` should have stopped: after two
    copies of a block of 4 or more tokens repeated 3 times or more, or after five copies of a
    shorter block repeated 6 times or more (digit lists repeat short blocks: "one, one, one, one");
    None where the end does not repeat like that. A loop that grows a copy or two per pass (each
    pass continues the forced prefix) never reaches a cap, so it is looked for here."""
    cut = None
    for period in range(1, max_period + 1):
        i = len(tokens) - period
        while i > 0 and tokens[i - 1] == tokens[i - 1 + period]:
            i -= 1
        keep = 2 if period >= 4 else 5
        if len(tokens) - i >= (keep + 1) * period:
            cut = min(cut if cut is not None else len(tokens), i + keep * period)
    return cut


PROMPT_COPY_TOKENS = 8  # a run this long of a pass's text found in its prompt is a copy, not speech


def copies_prompt(text: list[int], prompt: list[int], run: int = PROMPT_COPY_TOKENS) -> bool:
    """Whether ``text`` (a pass's new text tokens) holds ``run`` tokens in a row that its prompt
    (the committed text before the buffer) holds too: Whisper copies its prompt where the audio
    has too little speech to go on (on half a second after the last sentence, base wrote out the
    whole stream so far), and two passes on the same tail agree on the copy."""
    if len(text) < run or len(prompt) < run:
        return False
    seen = {tuple(prompt[i:i + run]) for i in range(len(prompt) - run + 1)}
    return any(tuple(text[i:i + run]) in seen for i in range(len(text) - run + 1))
