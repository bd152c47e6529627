"""The ``specwhisper`` command line. Errors a user can fix print one clear message, never a traceback."""

from __future__ import annotations

import argparse
import signal
import sys
import time
import warnings
from pathlib import Path

from . import __version__
from .audio import BUNDLED_SAMPLE
from .backend import BATCH_DECODERS
from .cli_batch import add_batch_parser, run_batch_command
from .cli_fw import add_fw_args
from .cli_listen import add_listen_parser, run_listen
from .cli_stream import add_stream_parser, run_stream
from .cli_streams import STDIN, StdoutFailed, drop_stdout, guard_streams, output_name, read_standard_input
from .cores import default_threads
from .encoders import ENCODERS
from .errors import SpecWhisperError
from .fallback import LADDER
from .features import N_FRAMES
from .file_transcriber import check_decoding_options, check_learn_save, open_transcriber
from .sigterm import Terminated, on_sigterm_unwind


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are the line that says what is wrong and where to look: the
    whole usage before it (29 lines for ``transcribe``) buried that line. Subcommands' parsers are
    made of this class too (``add_subparsers`` uses the parent's)."""

    words: list[str] = []  # the command line (main sets it): a file named like an option is told apart

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n  what to do: {self._advice(message)}see '{self.prog} --help'\n")

    def _advice(self, message: str) -> str:
        """What openai-whisper's users type that this command line spells otherwise (a helper as one)."""
        if dashed := [w for w in self.words if w.startswith("-") and _is_file(w)]:
            return f"a file whose name starts with '-' goes after '--' or as ./{dashed[0]}; "
        if not message.startswith("unrecognized arguments:"):
            return ""
        words = message.split(":", 1)[1].split()
        ours = {flag for action in self._actions for flag in action.option_strings}
        hyphens = [w.split("=")[0].replace("_", "-") for w in words if w.startswith("--") and "_" in w]
        if any(flag in ours for flag in hyphens):
            return f"options are spelled with hyphens ({', '.join(f for f in hyphens if f in ours)}); "
        if any(w in ("True", "False", "true", "false") for w in words):
            return "on/off options take no value (--word-timestamps, not --word-timestamps True); "
        return ""


def _is_file(word: str) -> bool:
    try:
        return Path(word).is_file()
    except (OSError, ValueError):  # a word too long for a file name, or one holding a NUL
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specwhisper",
        description="On-device Whisper transcription on CTranslate2, made faster losslessly by speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specwhisper {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.command_parsers = sub.choices  # type: ignore[attr-defined]

    t = sub.add_parser("transcribe", help="transcribe audio files",
                       description="Transcribe audio files. Speculation never changes the text in the same "
                                   "numerics: with the same --numerics pinned in both runs (batch-invariant, "
                                   "where drafts run), output equals --no-speculation token for token. "
                                   "--numerics auto chooses per window (recorded: --stats, json), and near-tie "
                                   "words may differ between the two numerics.")
    t.add_argument("audio", nargs="+", help="audio files (wav/flac/ogg/mp3; m4a/video with the [av] extra, which also decodes mp3)")
    add_model_args(t)
    t.add_argument("-f", "--output-format", default="txt", choices=["txt", "json", "srt", "vtt"],
                   help="txt prints to stdout, each text under a '==> FILE <==' line where several files are given "
                        "(and with --output-dir also writes <stem>.txt); other formats write "
                        "<stem>.<fmt>")
    t.add_argument("-o", "--output-dir", default=None, help="directory for output files (default: current directory "
                                                      "for json/srt/vtt; - writes them to stdout)")
    t.add_argument("--skip-existing", action="store_true",
                   help="leave out inputs whose output file is already there (to finish an interrupted batch)")
    add_decoding_args(t)
    t.add_argument("--learn-save", default=None, help="write the learned token map here at the end (atomic)")
    t.add_argument("--stats", action="store_true", help="print decoding stats (Ar, Al, calls) to stderr")

    d = sub.add_parser("demo", help="transcribe the bundled sample with the default model")
    add_model_args(d)

    m = sub.add_parser("models", help="list, pull, locate or verify models")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    msub.add_parser("list", help="known models and whether they are cached")
    for name, helptext in (("pull", "download and verify a model"), ("path", "print a model's directory"),
                           ("verify", "check a cached model's (or a model folder's) checksums")):
        p = msub.add_parser(name, help=helptext)
        p.add_argument("name")

    doc = sub.add_parser("doctor", help="platform, CT2 build, step API, CUDA, cached models, self-test")
    doc.add_argument("--model", default=None, help="also load this model and run the batch-invariance self-test")
    doc.add_argument("--compute-type", default="int8", choices=COMPUTE_TYPES)
    doc.add_argument("--threads", type=whole_number, default=2)
    doc.add_argument("--batch-decoder", default="auto", choices=BATCH_DECODERS)
    doc.add_argument("--encoder", default="auto", choices=ENCODERS)

    add_batch_parser(sub, add_model_args, add_decoding_args)
    add_stream_parser(sub, add_model_args)
    add_listen_parser(sub, add_model_args)
    _add_optional_subcommands(sub)
    return parser


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    """What decides a file's text and how fast it comes: shared by ``transcribe`` and ``batch``."""
    p.add_argument("--language", default=None, help="language code (default: detect; English-only models: en)")
    p.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    p.add_argument("--no-speculation", action="store_true", help="plain greedy decoding (the exactness oracle)")
    p.add_argument("--numerics", default="auto", choices=["auto", "batch-invariant", "single-row"],
                   help="auto: batch-invariant where drafting is expected to pay (or --draft-len is given), else "
                        "single-row (CT2 native); batch-invariant always where the invariant decoder is faster than "
                        "single-row. Near-tie words may differ between the two numerics, never within one")
    p.add_argument("--tokenmap", default=None, help="n-gram token map built with 'specwhisper tokenmap build'")
    p.add_argument("--draft-len", type=int, default=None, help="fixed draft length K (default: cost model)")
    p.add_argument("--prompt-lookup", dest="prompt_lookup", action="store_true", default=True,
                   help="draft from earlier text (default on)")
    p.add_argument("--no-prompt-lookup", dest="prompt_lookup", action="store_false")
    p.add_argument("--draft-model", default=None,
                   help="a small Whisper (name or CT2 dir) drafting ahead; used only where the cost model says it pays")
    p.add_argument("--learn", action="store_true", help="learn drafts from this run's own outputs, file by file")
    p.add_argument("--condition-on-previous-text", action="store_true",
                   help="prompt each 30 s window with the previous window's text")
    p.add_argument("--initial-prompt", default=None, help="text to prompt the first window with (hotwords)")
    p.add_argument("--audio-ctx", default="full",
                   help="encoder context: full (default, lossless), auto (short audio gets a short window: faster, "
                        "may change text), or mel frames 600|1000|1500|2000")
    p.add_argument("--temperature", default=",".join(f"{t:g}" for t in LADDER),
                   help="a fallback ladder: a window is decoded greedily and, while its text loops (gzip "
                        "compression ratio above 2.4), again at the next temperature (default "
                        "0,0.2,0.4,0.6,0.8,1, faster-whisper's); 0: greedy only; one value above 0: sample at "
                        "it. Speculation keeps the tokens of the same --seed")
    p.add_argument("--seed", type=int, default=0, help="sampling seed: same seed, same text (default 0)")
    p.add_argument("--timestamps", default="auto", choices=["auto", "on", "off"],
                   help="decode with timestamps: segments, and each window starts where the last complete "
                        "segment ended, so no speech is cut at a window edge (auto: on for audio over 30 s)")
    add_fw_args(p)


COMPUTE_TYPES = ("int8", "int8_float32", "int8_float16", "float32", "float16", "bfloat16", "default")


def whole_number(value: str) -> int:
    """An argparse type: a count such as threads, 1 or more (argparse then names the option)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {value!r}")
    return number


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="tiny.en, base (default), a CT2 model directory, or a HF repo id")
    p.add_argument("--compute-type", default="int8", choices=COMPUTE_TYPES)
    p.add_argument("--threads", type=whole_number, default=default_threads(4),
                   help="CPU threads (intra-op; default: the cores this process may use, at most 4)")
    p.add_argument("--decoder-threads", type=int, default=None,
                   help="threads of the decoder's calls (default: 1 unless --threads is clearly faster, measured once)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch-decoder", default="auto", choices=BATCH_DECODERS,
                   help="what batch-invariant (speculated) windows decode on: auto = CTranslate2 where its "
                        "self-test passes, unless the ONNX Runtime invariant decoder is faster (then every "
                        "window decodes on it), else the invariant decoder")
    p.add_argument("--encoder", default="auto", choices=ENCODERS,
                   help="auto = the fastest of CTranslate2's encoder and graphs of the model's weights on "
                        "ONNX Runtime and (where the openvino extra is installed) OpenVINO, measured once "
                        "per machine and cached")


def _add_optional_subcommands(sub) -> None:
    """Converters and token maps live in their own packages; their parsers plug in here."""
    try:
        from specwhisper.converters.cli import add_convert_parser
    except ImportError:
        pass
    else:
        add_convert_parser(sub)
    try:
        from specwhisper.tokenmap.cli import add_tokenmap_parser
    except ImportError:
        pass
    else:
        add_tokenmap_parser(sub)


def _replace_what_the_terminal_cannot_print() -> None:
    """Text Python's stdout/stderr encoding cannot write (a Japanese transcript with
    PYTHONIOENCODING=ascii, a Windows console's code page) is written escaped, not a
    UnicodeEncodeError after the work is done; UTF-8 output is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or foreign stream: leave it
                pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _Parser.words = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the command's own usage (argparse names the top level's, which lists no option)
        (parser.command_parsers.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    _replace_what_the_terminal_cannot_print()
    if args.command is None:
        parser.print_help()
        return 2
    warnings.simplefilter("default")
    warnings.formatwarning = lambda msg, *a, **k: f"warning: {msg}\n"
    restore_streams = guard_streams()
    notes = _say_notes_on_a_terminal()
    previous = on_sigterm_unwind()
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a full stdout fails here, not in the interpreter's exit
        return code
    except StdoutFailed as exc:
        drop_stdout(exc.stream)  # what is still buffered would fail again as the interpreter exits
        if exc.reader_left:  # output piped into head & co.
            return 0
        print(f"error: {exc.message()}", file=sys.stderr)
        return 1
    except SpecWhisperError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return 2
    except MemoryError:  # a box with little memory: said, not a traceback (files written stay whole)
        print("error: out of memory\n  what to do: close other programs, or use a smaller model (--model "
              "tiny.en), --threads 1, no --draft-model; a recording is held whole (about 0.35 GB an hour of "
              "audio, beside the model's 0.5-1 GB): split a very long one", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # files written are whole, the one under way leaves nothing (io_utils)
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:  # a pipe closed by its reader past the stdout guard (a child process's stdin)
        return 0
    finally:
        restore_streams()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if notes is not None:
            notes()


def _say_notes_on_a_terminal():
    """The engine's notes (``specwhisper`` logger, INFO: a first load measuring the machine) on
    stderr where a person watches it, as progress is; scripts' stderr stays as it was. Returns
    what puts the logger back as it was (None where nothing was changed)."""
    import logging

    log = logging.getLogger("specwhisper")
    if not sys.stderr.isatty() or log.handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("note: %(message)s"))
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # said once, not again by a handler of the application's root logger

    def restore() -> None:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate

    return restore


def _dispatch(args) -> int:
    if args.command == "transcribe":
        return _transcribe(args)
    if args.command == "demo":  # transcribe's own defaults (a list kept by hand missed new flags), with stats
        demo = build_parser().command_parsers["transcribe"].parse_args([str(BUNDLED_SAMPLE), "--stats"])
        for name, value in vars(args).items():  # the model flags demo takes
            setattr(demo, name, value)
        return _transcribe(demo)
    if args.command == "batch":
        return run_batch_command(args)
    if args.command == "models":
        return _models(args)
    if args.command == "stream":
        return run_stream(args)
    if args.command == "listen":
        return run_listen(args)
    if args.command == "doctor":
        from .doctor import run_doctor

        return run_doctor(args.model, args.compute_type, args.threads, args.batch_decoder, args.encoder)
    if args.command == "convert":
        from specwhisper.converters.cli import run_convert

        return run_convert(args)
    if args.command == "tokenmap":
        from specwhisper.tokenmap.cli import run_tokenmap

        return run_tokenmap(args)
    raise SpecWhisperError(f"unknown command {args.command}")


def _transcribe(args) -> int:
    from .audio import check_audio_path
    from .io_utils import check_writable_folder
    from .writers import output_path, render, write_result

    check_learn_save(args)
    cues = check_decoding_options(args)
    to_stdout = args.output_dir == STDIN  # -o -: every format to standard output (| jq), no files
    out_dir = None if to_stdout else args.output_dir or ("." if args.output_format != "txt" else None)
    if args.skip_existing and out_dir is None:
        raise SpecWhisperError("--skip-existing needs output files", where="--skip-existing",
                               hint="add --output-dir DIR or --output-format json|srt|vtt")
    if to_stdout and args.output_format in ("srt", "vtt") and len(set(args.audio)) > 1:
        raise SpecWhisperError(f"--output-dir - writes one {args.output_format} to standard output: subtitles of "
                               f"{len(set(args.audio))} inputs would run together", where="--output-dir -",
                               hint="give one input, or an output folder (--output-dir DIR)")
    inputs = args.audio if out_dir is None else _one_output_each(args.audio)
    inputs = [path for path in inputs
              if not (args.skip_existing and _skipped(output_path(output_name(path), out_dir, args.output_format)))]
    if not inputs:
        return 0
    if out_dir is not None:
        check_writable_folder(out_dir)  # before the model loads and the first file decodes
    failures, piped = 0, None
    for path in list(inputs):  # missing, empty, a folder: said before the model loads
        try:
            if path == STDIN:
                piped = read_standard_input()
            else:
                check_audio_path(path)
        except SpecWhisperError as exc:
            failures += 1
            inputs.remove(path)
            print(f"error: {exc.message()}", file=sys.stderr)
    if not inputs:
        return 1
    engine, transcribe_file = open_transcriber(args)
    # several texts on stdout: each under its file's name (as `head` labels files), so that a file
    # that fails or says nothing does not leave the reader guessing which text is whose
    label = len(args.audio) > 1
    for path in inputs:
        progress = _progress_printer(path) if sys.stderr.isatty() else None
        try:
            result = transcribe_file(piped if path == STDIN else path, progress)
        except SpecWhisperError as exc:
            failures += 1
            print(f"error: {exc.message()}", file=sys.stderr)
            continue
        extra = {"beam_size": args.beam_size, "input": path}  # the JSON's fields beside the result's
        if out_dir is not None:
            try:
                written = write_result(result, output_name(path), out_dir, args.output_format, extra, cues)
            except SpecWhisperError as exc:  # this file's output is lost (a full disk): said, the next files tried
                failures += 1
                print(f"error: {exc.message()}", file=sys.stderr)
            else:
                print(f"{path} -> {written}", file=sys.stderr)
        if args.output_format == "txt":
            print(f"==> {path} <==\n{result.text}" if label else result.text, flush=True)
        elif to_stdout:  # several JSON documents one after another: what jq reads
            print(render(result, args.output_format, extra, cues), end="", flush=True)
        if args.stats:
            _print_stats(path, result)
    if args.learn_save:
        saved = engine.save_learned(args.learn_save)
        print(f"learned token map -> {saved}", file=sys.stderr)
    return 1 if failures else 0


def _one_output_each(paths: list[str]) -> list[str]:
    """Each input once; two inputs whose outputs would share a name are an error before anything
    is decoded (the second would overwrite the first: outputs are named by the file's stem)."""
    from .batch.inputs import BatchItem, unique_names

    items = unique_names([BatchItem(path, Path(output_name(path)).stem) for path in paths],
                         hint="transcribe them into different --output-dir folders, or use `specwhisper batch` "
                              "on their common folder (its outputs keep the subfolders)")
    return [item.path for item in items]


def _skipped(output: Path) -> bool:
    if not output.exists():
        return False
    if not _whole(output):  # not written by us (ours are written whole, atomically): a 0-byte json was kept
        print(f"{output} exists but is not a whole {output.suffix[1:]} output: transcribed again (--skip-existing)",
              file=sys.stderr)
        return False
    print(f"{output} exists: skipped (--skip-existing)", file=sys.stderr)
    return True


def _whole(output: Path) -> bool:
    """Whether an existing output is one this command could have written: JSON that parses to a
    result, WebVTT with its header; txt and srt may be empty (a file without speech)."""
    import json

    if output.suffix not in (".json", ".vtt"):
        return True
    try:
        text = output.read_text(encoding="utf-8")
        return isinstance(json.loads(text), dict) if output.suffix == ".json" else text.startswith("WEBVTT")
    except (OSError, ValueError):
        return False


def _print_stats(path: str, result) -> None:
    s, t = result.stats, result.timings
    if not t:
        print(f"[{Path(path).name}] no speech found: nothing decoded", file=sys.stderr)
        return
    print(f"[{Path(path).name}] language={result.language} ({result.language_source}) "
          f"numerics={result.numerics} row_floor={result.row_floor} "
          f"tokens={s['tokens']} verify_calls={s['verify_calls']} steps={s['steps']} drafted={s['drafted']} "
          f"accepted={s['accepted']} Ar={s['acceptance_rate']:.2f} Al={s['mean_accepted_len']:.2f} "
          f"mean_k={s['mean_k']:.1f} | features {t['features_s'] * 1000:.0f} ms, encoder {t['encoder_s'] * 1000:.0f} ms, "
          f"decoder {t['decoder_s'] * 1000:.0f} ms, total {t['total_s'] * 1000:.0f} ms (model load {t['load_s']:.2f} s)",
          file=sys.stderr)


def _progress_printer(path: str):
    start = time.perf_counter()

    def show(done: int, total: int) -> None:
        if total > N_FRAMES:  # more than one window
            end = "\n" if done == total else ""
            print(f"\r{Path(path).name}: {done / 100:.0f}/{total / 100:.0f} s of audio "
                  f"({time.perf_counter() - start:.1f} s)", end=end,
                  file=sys.stderr, flush=True)

    return show


def _models(args) -> int:
    from . import model_store

    if args.models_command == "list":
        for entry in model_store.list_models():
            state = "cached" if entry["pulled"] else "not pulled"
            print(f"{entry['name']:<8} {state:<10} {entry['description']}  [{entry['path']}]")
        return 0
    if args.models_command == "pull":
        if args.name not in model_store.REGISTRY:  # faster-whisper's other sizes and repo ids: from the hub
            print(f"{args.name}: at {model_store.resolve_model(args.name)}")
            return 0
        cached = model_store.is_pulled(args.name)
        if cached:
            try:
                model_store.verify(args.name)
            except SpecWhisperError as exc:
                print(f"{args.name}: {exc.what} ({exc.where}): repairing it", file=sys.stderr)
            else:
                print(f"{args.name}: already cached (checksum verified) at {model_store.model_path(args.name)}")
                return 0
        path = model_store.pull(args.name, repair=True)
        print(f"{args.name}: {'repaired' if cached else 'pulled'} at {path}")
        return 0
    if args.models_command == "path":
        print(model_store.resolve_model(args.name, download=False))
        return 0
    if args.models_command == "verify":
        if args.name not in model_store.REGISTRY and Path(args.name).expanduser().is_dir():
            checked = model_store.verify_folder(Path(args.name).expanduser())
            print(f"{args.name}: ok ({checked} files match the checksums in its model_card.json)" if checked else
                  f"{args.name}: files present and config.json valid; no model_card.json, so its bytes cannot be "
                  "checked (models converted with 'specwhisper convert' carry one)")
            return 0
        digest = model_store.verify(args.name)
        print(f"{args.name}: ok (model.bin sha256 {digest})")
        return 0
    raise SpecWhisperError(f"unknown models action {args.models_command}")


if __name__ == "__main__":
    sys.exit(main())
