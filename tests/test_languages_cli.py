"""What a user whose speakers use several languages met (a helper as a new user, session 57): a
token map of Japanese or Spanish text recorded English and turned transcription into translation,
inspect split characters, a Japanese transcript on an ASCII stdout ended in a traceback, and a
subcommand's unknown option showed the top-level usage. (``WhisperModel`` on an English-only model
warns for language="English" as faster-whisper 1.2 does: kept, ``test_whisper_model.py``.)"""

from __future__ import annotations

import io
import sys

import pytest

from specwhisper.cli import main
from specwhisper.tokenmap.corpus import doubt_english, why_not_english

JAPANESE = ["真っ昼間なのにキャンプの外れの電柱に電球がともっていた", "電気をつけて", "電気を消して"] * 3
SPANISH = ["enciende la luz de la cocina", "apaga la luz del salón", "sube el volumen de la música",
           "pon la temperatura a veinte grados", "abre las persianas del dormitorio"] * 2


def test_transcripts_that_are_not_english_are_told_apart(shared_data):
    english = (shared_data / "domain/smarthome/train.txt").read_text(encoding="utf-8").splitlines()
    assert why_not_english(english) is None and doubt_english(english) is None
    terse = ["call john smith", "play jazz music", "set timer five minutes", "next track please"] * 3
    accented = ["call Beyoncé", "play café music", "call José Núñez"] * 3
    assert why_not_english(terse) is None and why_not_english(accented) is None  # English: never refused
    assert "Latin alphabet" in why_not_english(JAPANESE)
    assert "common English words" in doubt_english(SPANISH) and why_not_english(SPANISH) is None


def test_a_map_of_foreign_text_asks_for_its_language(tmp_path, base_model_dir, capsys):
    src, out = tmp_path / "ja.txt", tmp_path / "ja.tmap"
    src.write_text("\n".join(JAPANESE), encoding="utf-8")
    build = ["tokenmap", "build", str(src), "--model", str(base_model_dir), "-o", str(out)]
    assert main(build) == 2
    err = capsys.readouterr().err
    assert "are not English" in err and "--language" in err and not out.exists()
    assert main(build + ["--language", "ja"]) == 0 and "language ja" in capsys.readouterr().err
    # Spanish (Latin letters) builds, recorded as English, with a warning that says what that does
    es = tmp_path / "es.txt"
    es.write_text("\n".join(SPANISH), encoding="utf-8")
    with pytest.warns(UserWarning, match="may not be English .* comes out translated"):
        assert main(["tokenmap", "build", str(es), "--model", str(base_model_dir), "-o", str(tmp_path / "es.tmap")]) == 0
    # inspect decodes runs of tokens whole (昼 spans two tokens: it was shown as two U+FFFD; an n-gram
    # that starts or ends inside a character still shows the part as U+FFFD)
    assert main(["tokenmap", "inspect", str(out), "真っ昼間なのに", "--model", str(base_model_dir)]) == 0
    shown = capsys.readouterr().out
    assert "context '真っ昼間なのに'" in shown and "キャンプの外" in shown


def test_the_python_api_asks_the_transcripts_too(base_model_dir):
    """``build_token_map`` without ``language`` recorded en for Japanese text, with no check: the
    CLI's check runs there too (on a generator's first lines, which it then builds from)."""
    from specwhisper.errors import TokenMapError
    from specwhisper.tokenizer import WhisperTokenizer
    from specwhisper.tokenmap import build_token_map

    tokenizer = WhisperTokenizer.from_model_dir(base_model_dir)
    with pytest.raises(TokenMapError, match="are not English") as info:
        build_token_map(iter(JAPANESE), tokenizer)
    assert "language='ja'" in info.value.hint
    assert build_token_map((t for t in JAPANESE), tokenizer, language="ja").header.language == "ja"
    with pytest.warns(UserWarning, match="may not be English"):
        assert build_token_map(SPANISH, tokenizer).header.language == "en"
    english = ["turn on the kitchen lights", "turn off the kitchen lights"] * 3
    from_generator = build_token_map((t for t in english), tokenizer)
    assert from_generator.header.language == "en"
    assert from_generator.to_bytes() == build_token_map(english, tokenizer).to_bytes()  # nothing asked is lost


def test_text_an_ascii_stdout_cannot_hold_is_escaped(monkeypatch):
    from specwhisper.cli import _replace_what_the_terminal_cannot_print

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    _replace_what_the_terminal_cannot_print()
    print("電気 on", flush=True)
    assert raw.getvalue() == b"\\u96fb\\u6c17 on\n"


def test_an_unknown_option_is_named_by_its_commands_usage(capsys):
    with pytest.raises(SystemExit) as info:
        main(["stream", "x.wav", "--tentative"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "specwhisper stream: error: unrecognized arguments: --tentative" in err
    # the line that says what is wrong and where to look, not 30 lines of usage before it
    assert "usage:" not in err and "see 'specwhisper stream --help'" in err and len(err.splitlines()) == 2
    # openai-whisper's spellings: said how this command line spells them
    with pytest.raises(SystemExit):
        main(["transcribe", "x.wav", "--output_format", "srt", "--word_timestamps", "True"])
    assert "spelled with hyphens (--output-format, --word-timestamps)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["transcribe", "x.wav", "--word-timestamps", "True"])
    assert "on/off options take no value" in capsys.readouterr().err
    # openai-whisper's short flags for the output folder and format mean the same here
    from specwhisper.cli import build_parser

    args = build_parser().parse_args(["transcribe", "x.wav", "-o", "out", "-f", "srt"])
    assert (args.output_dir, args.output_format) == ("out", "srt")
    args = build_parser().parse_args(["batch", "x.wav", "-o", "out", "-f", "vtt"])
    assert (args.output_dir, args.output_format) == ("out", "vtt")


def test_a_file_named_like_an_option_is_told_how_to_pass(capsys, tmp_path, monkeypatch):
    """`transcribe -x.flac` said "the following arguments are required: audio" and nothing of why."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-x.flac").write_bytes(b"fLaC")
    for argv in (["transcribe", "-x.flac"], ["transcribe", "other.flac", "-x.flac"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert "a file whose name starts with '-' goes after '--' or as ./-x.flac" in capsys.readouterr().err


def test_a_map_that_records_english_for_text_that_is_not_is_not_trusted(base_engine, tmp_path):
    """Maps that earlier versions built from Japanese lines without ``--language`` record English;
    transcribing with one decoded Japanese speech in English (a translation, without a word). At load
    its own tokens say otherwise: warned, and the language is detected instead."""
    from specwhisper import WhisperEngine
    from specwhisper.tokenmap import build_token_map

    path = tmp_path / "ja_recorded_en.tmap"
    build_token_map(JAPANESE, base_engine.tokenizer, language="en").save(path)
    with pytest.warns(UserWarning, match="records English, but its text is not .* Latin alphabet"):
        engine = WhisperEngine(loaded=base_engine.lm, tokenmap=str(path))
    assert engine.tokenmap_language is None
    english = tmp_path / "en.tmap"
    build_token_map(["turn on the kitchen lights", "turn off the kitchen lights"] * 3, base_engine.tokenizer).save(english)
    assert WhisperEngine(loaded=base_engine.lm, tokenmap=str(english)).tokenmap_language == "en"


def test_language_auto_detects_even_with_a_token_map(base_engine, shared_data, tmp_path):
    """A voice server's helper: with a map recording English, `language="auto"` still decoded in
    English (Swedish speech came out translated); "auto" asks for detection, no language takes the map's."""
    from specwhisper import WhisperEngine
    from specwhisper.tokenmap import build_token_map

    path = tmp_path / "en.tmap"
    build_token_map(["turn on the kitchen lights", "turn off the kitchen lights"] * 3, base_engine.tokenizer).save(path)
    engine = WhisperEngine(loaded=base_engine.lm, tokenmap=str(path))
    jfk = shared_data / "real/audio/jfk.flac"
    assert engine.transcribe(jfk, max_new_tokens=4).language_source == "token map"
    detected = engine.transcribe(jfk, language="auto", max_new_tokens=4)
    assert detected.language_source == "detected" and detected.language == "en"
