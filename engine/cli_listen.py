"""``specwhisper listen [FILE|-|mic]``: command mode on the command line (see ``listen``).

Each spoken command is decoded once, when the speaker stops, with the domain token map
(``--tokenmap``; its language is used unless ``--language`` is given) and, with ``--learn``,
what the commands before it taught. Sources as ``specwhisper stream`` (``cli_audio``); the
microphone is the default. ``txt`` prints one line per command; ``json`` one JSON object per
command (text, times, latency, the decoding's stats).
"""

from __future__ import annotations

import json
import sys

from .cli_audio import audio_source
from .errors import OptionError
from .file_transcriber import check_learn_save
from .sigterm import Terminated


def add_listen_parser(sub, add_model_args) -> None:
    p = sub.add_parser("listen", help="command mode: one line per spoken command (microphone, file or stdin)",
                       description="Command mode: speech is endpointed (Silero VAD where the [vad] extra is "
                                   "installed, else energy) and each utterance is decoded once when the speaker "
                                   "stops, drafted by the domain token map (lossless).")
    p.add_argument("source", nargs="?", default="mic",
                   help="'mic' (default), an audio file, or '-' for stdin (a WAV stream, or raw 16 kHz mono s16le PCM)")
    add_model_args(p)
    p.add_argument("--tokenmap", default=None, help="the domain's token map (specwhisper tokenmap build); it also "
                                                    "sets the language unless --language is given")
    p.add_argument("--learn", action="store_true", help="learn drafts from the commands heard (a repeat is drafted "
                                                        "whole)")
    p.add_argument("--learn-save", default=None, help="write the learned token map here at the end (atomic)")
    p.add_argument("--language", default=None, help="language code (default: the token map's, else detected "
                                                    "per command)")
    p.add_argument("-f", "--output-format", default="txt", choices=["txt", "json"],
                   help="txt: one line per command; json: one JSON object per command")
    p.add_argument("--realtime", action="store_true", help="play a file or stdin at real time (default: as fast "
                                                           "as it is decoded)")
    ends = p.add_mutually_exclusive_group()
    ends.add_argument("--vad", dest="endpointing", action="store_const", const="vad",
                      help="endpoint with Silero VAD (the [vad] extra; the default where installed)")
    ends.add_argument("--energy", dest="endpointing", action="store_const", const="energy",
                      help="endpoint on frame energy (no dependency; fooled by loud noise)")
    p.set_defaults(endpointing="auto")
    p.add_argument("--silence-ms", type=int, default=600, help="silence that ends a command (default 600)")
    p.add_argument("--complete-ms", type=int, default=None,
                   help="end a command after this much silence when the token map says its text is a whole "
                        "command (e.g. 100; default off: waits --silence-ms; needs --tokenmap or --learn)")
    p.add_argument("--max-utterance", type=float, default=15.0, help="seconds after which an utterance is cut "
                                                                     "(default 15)")
    p.add_argument("--no-speculation", action="store_true", help="plain greedy decoding (the exactness oracle)")
    p.add_argument("--numerics", default="auto", choices=["auto", "batch-invariant", "single-row"])
    p.add_argument("--draft-len", type=int, default=None, help="fixed draft length K (default: cost model)")
    p.add_argument("--audio-ctx", default="auto",
                   help="encoder context of a command: auto (default: a short window fitted to the command, 2-3x "
                        "faster; near-tie words may differ from full), full (30 s, as transcribe), or mel frames "
                        "600|1000|1500|2000")
    p.add_argument("--stats", action="store_true", help="print each command's latency and decoding stats to stderr")


def run_listen(args) -> int:
    from .listen import MAX_UTTERANCE_S, check_listener_options
    from .listen_endpoint import make_detector
    from .tokenizer import language_code
    from .transcribe_options import TranscribeOptions
    from .transcriber import WhisperEngine

    check_learn_save(args)
    # everything a user can get wrong fails before the model loads
    if not 100 <= args.silence_ms <= 5000:
        raise OptionError(f"--silence-ms must be between 100 and 5000, got {args.silence_ms}", where="--silence-ms",
                          hint="use e.g. 600 (pauses inside a command are shorter; more is more latency)")
    if not 1 <= args.max_utterance <= MAX_UTTERANCE_S:
        raise OptionError(f"--max-utterance must be between 1 and {MAX_UTTERANCE_S:g} s, got {args.max_utterance}",
                          where="--max-utterance", hint="use e.g. 15")
    complete_s = None if args.complete_ms is None else args.complete_ms / 1000
    if complete_s is not None and not (args.tokenmap or args.learn):
        raise OptionError("--complete-ms needs a token map to tell whole commands", where="--complete-ms",
                          hint="add --tokenmap FILE (or --learn), or leave --complete-ms out")
    check_listener_options(silence_s=args.silence_ms / 1000, max_utterance_s=args.max_utterance,
                           complete_s=complete_s)
    make_detector(args.endpointing, 0.5, None)  # --vad without the extra
    TranscribeOptions(language=args.language, numerics=args.numerics, audio_ctx=args.audio_ctx,
                      draft_len=args.draft_len)
    chunks = audio_source(args.source, args.realtime, "specwhisper listen")
    engine = WhisperEngine(args.model, device=args.device, compute_type=args.compute_type, threads=args.threads,
                           decoder_threads=args.decoder_threads, batch_decoder=args.batch_decoder,
                           encoder=args.encoder, tokenmap=args.tokenmap, learn=args.learn)
    listener = engine.listen(args.language, endpointing=args.endpointing, silence_s=args.silence_ms / 1000,
                             max_utterance_s=args.max_utterance, complete_s=complete_s,
                             speculation=not args.no_speculation,
                             numerics=args.numerics, audio_ctx=args.audio_ctx, draft_len=args.draft_len)
    if args.stats:
        language = language_code(args.language) or (f"{engine.tokenmap_language} (token map)" if engine.tokenmap_language
                                     else "detected per command" if engine.tokenizer.multilingual
                                     else "en (English-only model)")
        print(f"[listen] endpointing {listener.endpointing}, silence {args.silence_ms} ms, language {language}",
              file=sys.stderr)
    try:
        for result in listener.events(chunks):
            _show(result, args.output_format, args.stats)
    except (KeyboardInterrupt, Terminated):  # how a session ends (Ctrl-C, a service's stop): the command under way is still decoded
        if listener.finished:  # interrupted in that last decoding itself: stop ("interrupted", 130)
            raise
        for result in listener.finish():
            _show(result, args.output_format, args.stats)
    if args.stats:
        t = listener.totals
        print(f"[listen] {listener.time_s:.1f} s of audio, {t['utterances']} commands ({t['dropped']} too short "
              f"dropped), decoding {t['decode_s']:.2f} s: {t['tokens']} tokens in {t['decoder_calls']} decoder calls, "
              f"drafts {t['accepted']}/{t['drafted']} accepted", file=sys.stderr)
    if args.learn_save:
        print(f"learned token map -> {engine.save_learned(args.learn_save)}", file=sys.stderr)
    return 0


def _show(result, output_format: str, stats: bool) -> None:
    if output_format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
    elif result.text.strip():
        print(result.text.strip(), flush=True)
    if stats:
        s = result.stats
        print(f"[listen] {result.start_s:.2f}-{result.end_s:.2f} s: latency {result.latency_s * 1000:.0f} ms "
              f"(decoding {result.decode_s * 1000:.0f} ms), {s['tokens']} tokens in {s['decoder_calls']} decoder "
              f"calls, drafts {s['accepted']}/{s['drafted']} accepted, {s['numerics']}, language {result.language} "
              f"({result.language_source})", file=sys.stderr)
