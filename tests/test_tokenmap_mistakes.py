"""Token maps: what a new user gets wrong (a grammar file, a map of another model) is said plainly."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from specwhisper.cli import main
from specwhisper.errors import TokenMapError
from specwhisper.model_store import REQUIRED_FILES
from specwhisper.tokenizer import WhisperTokenizer
from specwhisper.tokenmap import build_token_map, load_token_map
from specwhisper.tokenmap.build import check_language
from specwhisper.tokenmap.corpus import read_transcripts

GRAMMAR = "{room} lights on\nTurn off\nSet {device_name} to {level}\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _no_warnings(call):
    """``call()``'s result, failing on any warning it gives."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


# --- which kind a file is ---------------------------------------------------------------------------
def test_a_txt_grammar_starting_with_a_brace_is_text_and_its_slots_warn_once(tmp_path):
    src = _write(tmp_path / "g2.txt", GRAMMAR)
    with pytest.warns(UserWarning) as record:
        texts = read_transcripts([src])
    assert texts == ["{room} lights on", "Turn off", "Set {device_name} to {level}"]
    assert len(record) == 1  # once per file, not once per line
    message = str(record[0].message)
    assert str(src) in message and "2 lines" in message and "line 1" in message
    assert "'{room} lights on'" in message and "literal text" in message and "expand" in message


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("grammar", "\n{room} lights on\n", ["{room} lights on"]),  # no extension, not JSON: text
    ("manifest", '{"text": "Turn on the lights."}\n{"text": "Stop."}\n', ["Turn on the lights.", "Stop."]),
    ("list.ndjson", '{"text": "Stop."}\n', ["Stop."]),
])
def test_a_manifest_is_told_by_its_extension_else_by_a_json_first_line(tmp_path, name, content, expected):
    src = _write(tmp_path / name, content)
    if "{room}" in content:
        with pytest.warns(UserWarning, match="1 line has unexpanded grammar slots"):
            assert read_transcripts([src]) == expected
    else:
        assert _no_warnings(lambda: read_transcripts([src])) == expected


def test_a_jsonl_extension_is_a_manifest_whatever_its_first_line(tmp_path):
    src = _write(tmp_path / "g2.jsonl", GRAMMAR)
    with pytest.raises(TokenMapError, match="line 1 is not valid JSON") as err:
        read_transcripts([src])
    assert err.value.where == str(src)


def test_a_manifest_named_txt_is_read_as_one_and_half_a_manifest_warns(tmp_path):
    row = json.dumps({"text": "Turn on the lights."})
    src = _write(tmp_path / "manifest.txt", f"\n{row}\n{row}\n")
    assert _no_warnings(lambda: read_transcripts([src])) == ["Turn on the lights."] * 2  # every line says so
    mixed = _write(tmp_path / "mixed.txt", f"\n{row}\nTurn off the lights.\n")
    with pytest.warns(UserWarning, match=r"line 2 is a JSON object.*name a JSONL manifest \.jsonl"):
        assert read_transcripts([mixed]) == [row, "Turn off the lights."]


def test_braces_that_are_not_slots_do_not_warn(tmp_path):
    lines = ["Press {} twice", "Item {1} is done", "Say { room } please", '{"text" is not a slot}']
    src = _write(tmp_path / "plain.txt", "\n".join(lines) + "\n")
    assert _no_warnings(lambda: read_transcripts([src])) == lines


def test_cli_builds_a_grammar_txt(tiny_model_dir, tmp_path, capsys):
    src, out = _write(tmp_path / "g2.txt", GRAMMAR), tmp_path / "g2.tmap"
    with pytest.warns(UserWarning, match="unexpanded grammar slots"):
        rc = main(["tokenmap", "build", str(src), "-o", str(out), "--model", str(tiny_model_dir)])
    assert rc == 0, capsys.readouterr().err
    assert load_token_map(out).stats()["transcripts"] == 3


# --- a map of another model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_tok(tiny_model_dir) -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(tiny_model_dir)


@pytest.fixture(scope="module")
def base_tok(base_model_dir) -> WhisperTokenizer:
    return WhisperTokenizer.from_model_dir(base_model_dir)


@pytest.fixture(scope="module")
def tiny_map_file(tiny_tok, tmp_path_factory) -> Path:
    lines = ["Turn on the lights.", "Turn off the lights.", "Call home."] * 2
    return build_token_map(lines, tiny_tok).save(tmp_path_factory.mktemp("tmap") / "tiny.tmap")


def _store(root: Path, models: dict[str, Path], monkeypatch) -> None:
    """A model store at ``root`` (SPECWHISPER_CACHE) whose ``models`` are links to real model
    files: which models are "pulled" is up to the test, not to this machine's cache."""
    for name, source in models.items():
        folder = root / "models" / name
        folder.mkdir(parents=True)
        for file in (*REQUIRED_FILES, "vocabulary.txt", "vocabulary.json"):
            if (source / file).is_file():
                os.symlink(source / file, folder / file)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(root))


def test_a_foreign_map_names_the_pulled_model_it_was_built_for(tiny_map_file, tiny_model_dir, base_tok, tmp_path,
                                                               monkeypatch):
    _store(tmp_path, {"tiny.en": tiny_model_dir}, monkeypatch)
    with pytest.raises(TokenMapError, match="another tokenizer, tiny.en's") as err:
        load_token_map(tiny_map_file, base_tok)
    assert err.value.hint.startswith("use --model tiny.en with this map")
    assert base_tok.fingerprint() in err.value.what  # the hashes stay, for a model outside the store


def test_a_foreign_map_names_every_model_that_shares_its_tokenizer(tiny_map_file, tiny_model_dir, base_tok,
                                                                   tmp_path, monkeypatch):
    _store(tmp_path, {"tiny.en": tiny_model_dir, "base": tiny_model_dir}, monkeypatch)
    with pytest.raises(TokenMapError, match="the one tiny.en and base share") as err:
        load_token_map(tiny_map_file, base_tok)
    assert "--model tiny.en or --model base" in err.value.hint


def test_a_foreign_map_of_no_pulled_model_keeps_the_plain_refusal(tiny_map_file, base_model_dir, base_tok, tmp_path,
                                                                  monkeypatch):
    _store(tmp_path, {"base": base_model_dir}, monkeypatch)  # base differs from the map's tokenizer
    with pytest.raises(TokenMapError, match=r"another tokenizer \(fingerprint") as err:
        load_token_map(tiny_map_file, base_tok)
    assert "--model MODEL" in err.value.hint and "--model base" not in err.value.hint


def test_cli_inspect_with_another_model_names_the_right_one(tiny_map_file, tiny_model_dir, base_model_dir,
                                                            tmp_path, monkeypatch, capsys):
    _store(tmp_path, {"tiny.en": tiny_model_dir}, monkeypatch)
    assert main(["tokenmap", "inspect", str(tiny_map_file), "Turn", "--model", str(base_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "tiny.en's" in err and "use --model tiny.en" in err and "Traceback" not in err


# --- language names ---------------------------------------------------------------------------------
def test_language_names_are_taken_as_their_codes():
    assert [check_language(name) for name in ("French", "french", " FRENCH ", "fr")] == ["fr"] * 4


def test_cli_build_takes_a_language_name(base_model_dir, tmp_path, capsys):
    src, out = _write(tmp_path / "fr.txt", "Allume la lumière.\nÉteins la lumière.\n"), tmp_path / "fr.tmap"
    assert main(["tokenmap", "build", str(src), "-o", str(out), "--model", str(base_model_dir),
                 "--language", "French"]) == 0
    assert "language fr (--language)" in capsys.readouterr().err
    assert load_token_map(out).header.language == "fr"
