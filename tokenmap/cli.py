"""``specwhisper tokenmap build|info|inspect``: plugged into the main CLI by ``add_tokenmap_parser``.

Errors are raised as TokenMapError / ModelError; the main CLI prints them as one message.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specwhisper.errors import TokenMapError

from .build import (
    DEFAULT_BUDGET,
    DEFAULT_LANGUAGE,
    DEFAULT_MAX_LEN,
    DEFAULT_MIN_COUNT,
    DEFAULT_N,
    DEFAULT_PREFIX_MIN_COUNT,
    DEFAULT_TOP_K,
    build_token_map,
)

PROGRESS_MIN_LINES = 5000


def add_tokenmap_parser(subparsers) -> None:
    tm = subparsers.add_parser("tokenmap", help="build, describe and inspect n-gram token maps",
                               description="N-gram token maps draft tokens for speculative decoding; "
                                           "build one from transcripts of your domain.")
    sub = tm.add_subparsers(dest="tokenmap_command", metavar="ACTION", required=True)

    b = sub.add_parser("build", help="build a map from transcripts",
                       description="Build a token map from text files (one transcript a line) and JSONL "
                                   "manifests (a 'text' field a line). Same input, same bytes.")
    b.add_argument("transcripts", nargs="+", metavar="TRANSCRIPTS", help="text files or JSONL manifests")
    b.add_argument("--model", default="base", help="model whose tokenizer the map is for (name or CT2 directory)")
    b.add_argument("-o", "--output", required=True, help="the map file to write (atomically)")
    b.add_argument("--n", type=int, default=DEFAULT_N, help="longest context in tokens (default %(default)s)")
    b.add_argument("--max-len", type=int, default=DEFAULT_MAX_LEN,
                   help="longest continuation stored after a context (default %(default)s)")
    b.add_argument("--min-count", type=int, default=DEFAULT_MIN_COUNT,
                   help="drop n-grams seen fewer times (default %(default)s)")
    b.add_argument("--prefix-min-count", type=int, default=DEFAULT_PREFIX_MIN_COUNT,
                   help="drop utterance prefixes seen fewer times (default %(default)s: every transcript is recallable)")
    b.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                   help="continuations kept per context, 0 for all (default %(default)s)")
    b.add_argument("--budget", default=f"{DEFAULT_BUDGET // (1 << 20)}M",
                   help="largest file size, e.g. 500k, 64M, 1G (default %(default)s); rarest entries go first")
    b.add_argument("--language", default=None,
                   help="language of the transcripts, recorded in the map: transcribing with the map decodes in it "
                        f"unless --language is given there (default {DEFAULT_LANGUAGE}; 'none' records none: the language "
                        "is then detected)")
    b.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")

    i = sub.add_parser("info", help="print a map's header and statistics")
    i.add_argument("file", metavar="FILE")
    i.add_argument("--json", action="store_true", help="print JSON")

    s = sub.add_parser("inspect", help="show the ranked continuations a map holds for a text prefix")
    s.add_argument("file", metavar="FILE")
    s.add_argument("prefix", metavar="TEXT", help="the start of an utterance, e.g. \"Turn on the\" ('' for none)")
    s.add_argument("--model", default="base", help="model whose tokenizer the map was built for")
    s.add_argument("--limit", type=int, default=8, help="continuations shown per context (default %(default)s)")


def run_tokenmap(args) -> int:
    if args.tokenmap_command == "build":
        return _build(args)
    if args.tokenmap_command == "info":
        return _info(args)
    if args.tokenmap_command == "inspect":
        return _inspect(args)
    raise TokenMapError(f"unknown tokenmap action {args.tokenmap_command}")


def _tokenizer(model: str):
    """Tokenizer of a model name (through the model store) or a CT2 directory."""
    from specwhisper.tokenizer import WhisperTokenizer

    try:
        from specwhisper.model_store import resolve_model
    except ImportError:
        return WhisperTokenizer.from_model_dir(Path(model))
    return WhisperTokenizer.from_model_dir(resolve_model(model))


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)i?b?\s*", str(text), re.IGNORECASE)
    if not m:
        raise TokenMapError(f"cannot read size {text!r}", where="--budget", hint="use e.g. 500k, 64M or 1G")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _build(args) -> int:
    from .build import check_language
    from .corpus import english_unless_plainly_not, read_transcripts

    t0 = time.perf_counter()
    budget = parse_size(args.budget)
    check_language(args.language)  # a typo fails before the transcripts are read
    texts = read_transcripts(args.transcripts)
    language = english_unless_plainly_not(texts) if args.language is None else args.language
    tokenizer = _tokenizer(args.model)
    progress = None
    if not args.quiet and sys.stderr.isatty() and len(texts) >= PROGRESS_MIN_LINES:
        progress = _progress_bar("tokenising")
    tmap = build_token_map(texts, tokenizer, n=args.n, max_len=args.max_len, min_count=args.min_count,
                           top_k=args.top_k or None, budget_bytes=budget, prefix_min_count=args.prefix_min_count,
                           progress=progress, language=language)
    path = tmap.save(args.output, option="--output")
    if not args.quiet:
        st = tmap.stats()
        language = f"language {st['language']}" if st["language"] else "no language"
        given = "the default; --language sets it" if args.language is None else "--language"
        print(f"{path}: {st['transcripts']} transcripts, {st['tokens']} tokens -> {st['nodes']} nodes, "
              f"{st['bytes'] / 1e6:.2f} MB, {language} ({given}) in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return 0


def _info(args) -> int:
    from . import load_token_map

    st = load_token_map(args.file).stats()
    if args.json:
        print(json.dumps(st, indent=1))
        return 0
    print(f"{args.file}")
    for key, value in st.items():
        print(f"  {key:<18} {value}")
    return 0


def _inspect(args) -> int:
    from specwhisper.drafters.tokenmap_drafter import TokenMapDrafter

    from . import load_token_map

    tokenizer = _tokenizer(args.model)
    tmap = load_token_map(args.file, tokenizer)
    text = args.prefix.strip()
    tokens = tokenizer.encode(" " + text) if text else []
    eot = tmap.header.eot

    def show(ids) -> str:
        """Runs of text decoded whole: a character split over tokens (昼, ó) decodes from all its bytes."""
        text, run = "", []
        for t in [*ids, eot]:
            if t == eot:
                text += tokenizer.decode(run) if run else ""
                run = []
                text += "<eot>"
            else:
                run.append(t)
        return text[:-len("<eot>")]

    def piece(t: int) -> str:
        decoded = tokenizer.decode([t])
        return decoded if "\ufffd" not in decoded else f"<{t}: part of a character>"

    print(f"prefix {text!r} -> tokens {[piece(t) for t in tokens]}")
    node = tmap.find([tmap.header.begin, *tokens])
    if node >= 0:
        print(f"prefix memory: {tmap.count(node)} utterance path(s) begin like this"
              + (" (with and without the leading space)" if not tokens else ""))
        for path, count in tmap.continuations(node, args.limit):
            print(f"  {count:>7}  {show(path)!r}")
    else:
        print("prefix memory: no transcript begins like this")
    seq = [tmap.header.begin, *tokens]
    for n in range(min(tmap.depth - 1, len(seq) - 1), 0, -1):
        ctx = seq[-n:]
        node = tmap.find(ctx)
        if node < 0:
            continue
        print(f"context {show(ctx)!r} ({n} token{'s' if n > 1 else ''}, seen {tmap.count(node)} times)")
        for path, count in tmap.continuations(node, args.limit):
            print(f"  {count:>7}  {show(path)!r}")
    drafter = TokenMapDrafter(tmap, tokenizer)
    draft = drafter.propose(tokens, 16)
    conf = ", ".join(f"{p:.2f}" for p in drafter.last_confidence)
    print(f"draft: {show(draft)!r} (confidence {conf or '-'})")
    return 0


def _progress_bar(label: str, width: int = 30) -> Callable[[int, int], None]:
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        finished = total and done >= total
        if not finished and now - last[0] < 0.2:
            return
        last[0] = now
        if total:
            filled = int(width * done / total)
            print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr,
                  flush=True)
        else:
            print(f"\r{label} {done}", end="", file=sys.stderr, flush=True)
        if finished:
            print(file=sys.stderr)

    return show


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m specwhisper.tokenmap.cli``), same as ``specwhisper tokenmap``."""
    from specwhisper.errors import SpecWhisperError

    parser = argparse.ArgumentParser(prog="specwhisper")
    add_tokenmap_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        return run_tokenmap(args)
    except SpecWhisperError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
