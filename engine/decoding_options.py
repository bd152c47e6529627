"""faster-whisper's decoding options turned into what a window decodes with: checked values, the
prompt, the suppressed ids and the clips of audio to decode.

The semantics are faster-whisper 1.2's (and openai/whisper's), so code written for it gets the same
prompts: previous text after ``<|startofprev|>`` (hot words first where no prefix is given), then
the SOT sequence, then ``<|notimestamps|>`` or, before a prefix, ``<|0.00|>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real

from .errors import OptionError
from .model_limits import MAX_POSITIONS

TIME_PRECISION = 0.02
MAX_HYPOTHESES = 64  # beam_size and best_of: hypotheses decoded side by side
MAX_CHUNK_LENGTH = 30  # seconds: the encoder's input; a longer window would not be seen whole


def check_decoding_options(opts) -> None:
    """Raise a clear error for a value faster-whisper would reject or misread (``opts``: a
    ``TranscribeOptions``)."""
    for name in ("beam_size", "best_of", "batch_size", "language_detection_segments"):
        _integer(opts, name, minimum=1)
    for name in ("beam_size", "best_of"):  # each is a hypothesis in memory: 100,000 took 24 GB and was killed
        if getattr(opts, name) > MAX_HYPOTHESES:
            raise OptionError(f"{name} must be at most {MAX_HYPOTHESES}, got {getattr(opts, name)}", where=name,
                              hint="use e.g. 5 (faster-whisper's default beam); wider searches change little "
                                   "and cost memory and time in proportion")
    _integer(opts, "no_repeat_ngram_size", minimum=0)
    if opts.max_new_tokens is not None:
        _integer(opts, "max_new_tokens", minimum=1)
    for name in ("patience", "length_penalty", "repetition_penalty", "prompt_reset_on_temperature",
                 "max_initial_timestamp"):
        _number(opts, name)
    for name in ("compression_ratio_threshold", "log_prob_threshold", "no_speech_threshold",
                 "hallucination_silence_threshold", "language_detection_threshold"):
        if getattr(opts, name) is not None:
            _number(opts, name)
    if opts.patience <= 0 or opts.max_initial_timestamp < 0:
        raise OptionError("patience must be > 0 and max_initial_timestamp >= 0",
                          where="patience/max_initial_timestamp", hint="use e.g. 1 and 1.0 (the defaults)")
    if opts.suppress_tokens is not None:
        tokens = list(opts.suppress_tokens)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise OptionError(f"suppress_tokens must be a list of token ids, got {opts.suppress_tokens!r}",
                              where="suppress_tokens", hint="use e.g. [-1] (the model's non-speech symbols)")
        object.__setattr__(opts, "suppress_tokens", tuple(tokens))
    object.__setattr__(opts, "chunk_length", check_chunk_length(opts.chunk_length))
    object.__setattr__(opts, "clip_timestamps", parse_clips(opts.clip_timestamps))
    prompt = opts.initial_prompt
    if prompt is not None and not isinstance(prompt, str):
        try:
            ids = tuple(int(t) for t in prompt)
        except (TypeError, ValueError):
            raise OptionError(f"initial_prompt must be text or token ids, got {type(prompt).__name__}",
                              where="initial_prompt", hint="pass a string or a list of ints") from None
        object.__setattr__(opts, "initial_prompt", ids)
    object.__setattr__(opts, "prefix", _text_or_ids(opts.prefix, "prefix"))
    object.__setattr__(opts, "draft_hint", _text_or_ids(opts.draft_hint, "draft_hint", text=False) or ())
    if opts.hotwords is not None and not isinstance(opts.hotwords, str):
        raise OptionError(f"hotwords must be text, got {type(opts.hotwords).__name__}", where="hotwords",
                          hint="pass a string")
    for name in ("initial_prompt", "prefix", "hotwords"):
        _encodable(getattr(opts, name), name)


def check_token_ids(opts, vocab_size: int) -> None:
    """Token ids a caller gave (``initial_prompt``, ``prefix``, ``suppress_tokens``; -1 stands for
    the model's list there) within the model's vocabulary: an id past it failed deep in a decoder
    call (an ONNX Runtime Gather error), checked here before any audio is read."""
    for name in ("initial_prompt", "prefix", "suppress_tokens"):
        ids = getattr(opts, name)
        if ids is None or isinstance(ids, str):
            continue
        bad = [t for t in ids if not (0 <= t < vocab_size or (name == "suppress_tokens" and t == -1))]
        if bad:
            raise OptionError(f"{name} holds token ids outside this model's vocabulary: {bad[:5]}", where=name,
                              hint=f"use ids from 0 to {vocab_size - 1} (the tokenizer's encode gives them)"
                                   + (", or -1 for the model's non-speech symbols" if name == "suppress_tokens" else ""))


def check_chunk_length(value) -> int | None:
    """faster-whisper's ``chunk_length``: None (30 s windows) or whole seconds in 1..30.

    faster-whisper 1.2.1 breaks outside that range instead of refusing (measured): a float (even
    10.0) is a TypeError in its seek loop (a float slice index), 0 hangs (seek never advances), a
    negative length yields the first window's segment forever, and above 30 its encoder input is
    trimmed to 30 s while seek still moves by the whole length, so every window skips audio no
    window decoded (40: 10 s of every 40). Here each is a clear error before any work.
    Returns the value as an ``int`` (a numpy integer is accepted, as faster-whisper accepts it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or not 1 <= value <= MAX_CHUNK_LENGTH:
        raise OptionError(f"chunk_length must be whole seconds from 1 to {MAX_CHUNK_LENGTH}, got {value!r}",
                          where="chunk_length",
                          hint=f"use e.g. 10, or leave it unset for {MAX_CHUNK_LENGTH} s windows (the encoder's input "
                               f"is {MAX_CHUNK_LENGTH} s: a longer window would skip audio)")
    return int(value)


def _text_or_ids(value, name: str, text: bool = True) -> str | tuple[int, ...] | None:
    """A string (where ``text``), or token ids as a tuple of ints (empty: None)."""
    if value is None or (text and isinstance(value, str)):
        return value
    try:
        ids = tuple(int(t) for t in value) if not isinstance(value, (str, bytes)) else None
    except (TypeError, ValueError):
        ids = None
    if ids is None:
        raise OptionError(f"{name} must be {'text or ' if text else ''}token ids, got {type(value).__name__}",
                          where=name, hint="pass a string or a list of ints" if text else "pass a list of ints")
    return ids or None


def _integer(opts, name: str, minimum: int) -> None:
    value = getattr(opts, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OptionError(f"{name} must be an integer >= {minimum}, got {value!r}", where=name,
                          hint=f"use a whole number of at least {minimum}")


def _encodable(text, name: str) -> None:
    """Text the tokenizer can take: a lone surrogate (bytes that were not UTF-8, as a shell passes
    them to Python) ended in the tokenizer's TypeError after the model had loaded."""
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise OptionError(f"{name} is not valid text: characters {exc.start}-{exc.end} are bytes that are not "
                              "UTF-8", where=name, hint="pass UTF-8 text (check the terminal's or the file's "
                                                        "encoding)") from None


def _number(opts, name: str) -> None:
    value = getattr(opts, name)
    if isinstance(value, bool) or not isinstance(value, Real) or value != value:
        raise OptionError(f"{name} must be a number, got {value!r}", where=name, hint="see the option's help")


def parse_clips(value) -> tuple[float, ...]:
    """``"0"``, ``"10,20,40"`` or ``[10, 20]``: start, end, start, ... in seconds (the last end
    defaults to the end of the audio)."""
    try:
        if isinstance(value, str):
            times = tuple(float(t) for t in value.split(",") if t.strip())
        else:
            times = tuple(float(t) for t in value)
    except (TypeError, ValueError):
        raise OptionError(f"clip_timestamps {value!r} is not a list of seconds", where="clip_timestamps",
                          hint='use e.g. "0" (everything) or "10,20,40,50"') from None
    if any(t < 0 or t != t for t in times) or any(b < a for a, b in zip(times[::2], times[1::2])):
        raise OptionError(f"clip_timestamps {value!r} must be non-negative start,end pairs with end >= start",
                          where="clip_timestamps", hint='use e.g. "10,20,40,50"')
    return times


def seek_clips(times: Sequence[float], content_frames: int) -> list[tuple[int, int]]:
    """(start, end) frame pairs to decode, faster-whisper's way of reading ``clip_timestamps``."""
    points = [round(t * 100) for t in times] or [0]
    if len(points) % 2:
        points.append(content_frames)
    return [(a, min(b, content_frames)) for a, b in zip(points[::2], points[1::2])]


def suppressed_ids(tokenizer, default: Sequence[int], suppress_tokens: Sequence[int] | None) -> list[int] | None:
    """The ids never emitted, or None for the model's own list (``[-1]``, the fast default).

    As faster-whisper: ``-1`` stands for the non-speech symbols (the model's list), and the
    control tokens are suppressed whatever the list."""
    tokens = list(suppress_tokens or [])
    if tokens == [-1]:
        return None
    special = tokenizer.special
    controls = [special.transcribe, special.translate, special.sot, special.sot_prev, special.no_speech,
                tokenizer.token_to_id("<|startoflm|>")]
    ids = {t for t in tokens if t >= 0} | {t for t in controls if t is not None}
    if -1 in tokens:
        ids |= set(default)
    return sorted(ids)


def window_prompt(tokenizer, language: str, task: str, previous: Sequence[int], timestamps: bool,
                  prefix: str | Sequence[int] | None = None,
                  hotwords: str | None = None) -> tuple[list[int], list[int], int]:
    """(prompt, forced prefix tokens at its end, index of SOT in it) for one window. A prefix of
    token ids is forced as given, timestamps included (a live stream's committed text, see ``live``)."""
    half = MAX_POSITIONS // 2
    prompt: list[int] = []
    if previous or (hotwords and not prefix):
        prompt.append(tokenizer.special.sot_prev)
        if hotwords and not prefix:
            prompt.extend(tokenizer.encode(" " + hotwords.strip())[:half - 1])
        prompt.extend(list(previous)[-(half - 1):])
    sot_index = len(prompt)
    prompt.extend(tokenizer.sot_sequence(language, task, timestamps=timestamps))
    forced: list[int] = []
    if prefix and not isinstance(prefix, str):
        forced = list(prefix)[:half - 1]
    elif prefix:
        forced = tokenizer.encode(" " + prefix.strip())[:half - 1]
        if timestamps:
            forced = [tokenizer.special.timestamp_begin] + forced
    return prompt + forced, forced, sot_index
