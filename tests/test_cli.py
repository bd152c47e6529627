"""The CLI contract: transcribe to txt/json, stats, numerics recorded, atomic output files."""

from __future__ import annotations

import json

from specwhisper.cli import main


def test_json_output_contract(base_model_dir, shared_data, tmp_path, capsys):
    audio = shared_data / "real/audio/jfk.flac"
    rc = main(["transcribe", str(audio), "--model", str(base_model_dir), "--threads", "2", "--output-format", "json",
               "--output-dir", str(tmp_path), "--language", "en", "--numerics", "single-row", "--stats"])
    err = capsys.readouterr().err
    assert rc == 0
    data = json.loads((tmp_path / "jfk.json").read_text())
    for key in ("text", "tokens", "language", "timings", "numerics", "stats"):
        assert key in data
    for key in ("features_s", "encoder_s", "decoder_s", "total_s"):
        assert data["timings"][key] >= 0
    for key in ("drafted", "accepted", "verify_calls", "steps"):
        assert key in data["stats"]
    assert data["numerics"] == "single-row" and data["language"] == "en" and data["task"] == "transcribe"
    tok_eot = 50257
    assert data["tokens"] and tok_eot not in data["tokens"] and 50258 not in data["tokens"]
    assert "ask not what your country" in data["text"]
    assert "Ar=" in err and "numerics=single-row" in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_speculation_and_no_speculation_agree_via_cli(base_model_dir, shared_data, tmp_path, capsys):
    audio = shared_data / "real/audio/librispeech_2412-153948-0000.flac"
    outputs = {}
    for name, extra in (("spec", ["--draft-len", "4"]), ("plain", ["--no-speculation"])):
        out = tmp_path / name
        rc = main(["transcribe", str(audio), "--model", str(base_model_dir), "--threads", "2", "--language", "en",
                   "--numerics", "batch-invariant", "--output-format", "json", "--output-dir", str(out), *extra])
        assert rc == 0
        outputs[name] = json.loads((out / f"{audio.stem}.json").read_text())
    capsys.readouterr()
    assert outputs["spec"]["tokens"] == outputs["plain"]["tokens"]
    assert outputs["spec"]["numerics"] == outputs["plain"]["numerics"] == "batch-invariant"
    assert outputs["spec"]["stats"]["verify_calls"] > 0 and outputs["plain"]["stats"]["drafted"] >= 0


def test_txt_to_stdout_and_continue_after_bad_file(base_model_dir, shared_data, tmp_path, capsys):
    good = shared_data / "real/audio/jfk.flac"
    rc = main(["transcribe", str(tmp_path / "missing.flac"), str(good), "--model", str(base_model_dir),
               "--threads", "2", "--language", "en"])
    out, err = capsys.readouterr()
    assert rc == 1  # one file failed, the other was transcribed
    assert "ask not what your country" in out and "missing.flac" in err
    # several files: each text under its file's name, so a failed one leaves no doubt whose text is whose
    assert out.startswith(f"==> {good} <==\n") and "missing.flac" not in out


def test_inputs_that_cannot_be_audio_are_said_before_the_model_loads(tmp_path, capsys):
    """A mistyped name waited for the model to load (5-20 s) before "audio file not found"; now
    missing, empty and folder inputs are said at once (the model here does not exist: loading it
    would be another error)."""
    (tmp_path / "empty.wav").write_bytes(b"")
    rc = main(["transcribe", str(tmp_path / "missing.flac"), str(tmp_path / "empty.wav"), str(tmp_path),
               "--model", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "audio file not found" in err and "empty (0 bytes)" in err and "got a directory" in err
    assert "no-such-model" not in err


def test_models_list_and_path(base_model_dir, capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "base" in out and "tiny.en" in out


def test_doctor_reports_step_api(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "step API" in out and "ctranslate2" in out
    from specwhisper.measure_cache import kernel_env

    assert f"kernel settings (part of the numerics; read once per process): {kernel_env()}" in out


def test_a_first_load_says_once_that_it_measures_the_machine(tmp_path, monkeypatch, caplog):
    """A first load measures the machine for 20-60 s: the first measurement of a process says so
    once on the ``specwhisper`` logger (a cached value read says nothing); the CLI shows such notes
    on a terminal only, and puts the logger back as it was when it returns."""
    import io
    import logging
    import sys
    import threading

    from specwhisper import cli, measure_cache

    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECWHISPER_NO_SELFTEST_CACHE", raising=False)
    monkeypatch.setattr(measure_cache, "_measuring_said", threading.Event())
    measure_cache.cache_put("measured", 1)
    with caplog.at_level(logging.INFO, logger="specwhisper"):
        assert measure_cache.cache_get("measured") == 1 and measure_cache.cache_get("not measured") is None
        assert not caplog.records  # reading says nothing
        measure_cache.measuring()
        measure_cache.measuring()
    assert [r.getMessage() for r in caplog.records] == [measure_cache.MEASURING_NOTE]
    # a notebook or a Python prompt, where no handler shows the logger's notes: said on stderr
    monkeypatch.setattr(measure_cache, "_measuring_said", threading.Event())
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    said = io.StringIO()
    monkeypatch.setattr(sys, "stderr", said)
    measure_cache.measuring()
    assert said.getvalue() == f"note: {measure_cache.MEASURING_NOTE}\n"
    monkeypatch.delattr(sys, "ps1")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log = logging.getLogger("specwhisper")
    before = (list(log.handlers), log.level, log.propagate)
    for stderr, shown in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stderr)
        restore = cli._say_notes_on_a_terminal()
        log.info(measure_cache.MEASURING_NOTE)
        assert (f"note: {measure_cache.MEASURING_NOTE}" in stderr.getvalue()) == shown
        if restore is not None:
            restore()
        assert (list(log.handlers), log.level, log.propagate) == before
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert cli.main(["models", "path", "tiny.en"]) in (0, 2)  # main puts the logger back too
    assert (list(log.handlers), log.level, log.propagate) == before


def test_demo_runs_with_every_flag_transcribe_has(tiny_model_dir, capsys):
    """``specwhisper demo`` (the README's first command) kept its own list of transcribe's defaults,
    and a new flag of transcribe ended it in an AttributeError; it takes transcribe's parser's now."""
    assert main(["demo", "--model", str(tiny_model_dir), "--threads", "2"]) == 0
    out = capsys.readouterr()
    assert "kitchen" in out.out.lower() and "numerics=" in out.err
