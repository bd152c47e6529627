"""``specwhisper convert``: the command-line face of :func:`specwhisper.converters.convert`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .quantize import QUANTIZATIONS


def add_convert_parser(subparsers) -> None:
    """Register the ``convert`` subcommand on the main CLI's subparsers."""
    p = subparsers.add_parser(
        "convert", help="convert a checkpoint to CTranslate2, re-quantize a CT2 model, or build draft remap tables",
        description="Convert SOURCE into a CTranslate2 model directory OUT_DIR. SOURCE is a CT2 folder "
                    "(re-encoded, numpy only), a Hugging Face Whisper folder or hub id, or an OpenAI .pt file "
                    "(the last two need the [convert] extra: torch CPU + transformers). OUT_DIR appears whole "
                    "or not at all, with a model_card.json.",
    )
    p.add_argument("source", help="CT2 folder, Hugging Face folder or hub id, or OpenAI .pt checkpoint")
    p.add_argument("-o", "--output", "--out-dir", dest="out_dir", required=True, help="output directory")
    p.add_argument("--quantization", default="int8", choices=list(QUANTIZATIONS),
                   help="weight storage (default int8: per-row absmax, as CTranslate2 computes it at load)")
    p.add_argument("--draft-map", default=None, metavar="OTHER_MODEL",
                   help="also store remap tables between this model's vocabulary and OTHER_MODEL's "
                        "(a folder or a model name such as tiny.en), for a cross-vocabulary drafter")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json (or a model folder holding one) for OpenAI .pt checkpoints, which carry none")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")


def run_convert(args: argparse.Namespace) -> int:
    """Run the conversion described by parsed arguments; SpecWhisperError propagates to the CLI."""
    from . import convert
    from .vocab_map import format_stats, load_vocab_map, vocab_map_path

    t0 = time.perf_counter()
    out = convert(args.source, args.out_dir, args.quantization, draft_map=args.draft_map,
                  tokenizer=args.tokenizer, overwrite=args.force)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"wrote {out} ({size / 1e6:.1f} MB, {args.quantization}) in {time.perf_counter() - t0:.1f} s")
    if args.draft_map is not None:
        from specwhisper.tokenizer import WhisperTokenizer

        from . import resolve_model_dir

        main_tok = WhisperTokenizer.from_model_dir(out)
        draft_tok = WhisperTokenizer.from_model_dir(resolve_model_dir(args.draft_map))
        path = vocab_map_path(out, draft_tok.fingerprint())
        vm = load_vocab_map(path, main_tok, draft_tok)
        print(f"vocabulary map: {Path(path).name}")
        print(format_stats(vm.stats))
    return 0
