"""A batch of files interrupted (issue 21): SIGINT or SIGTERM while the CLI transcribes several
files leaves every finished output whole, nothing of the one under way (no partial file, no
temporary file), exits 130 or 143, and ``--skip-existing`` then finishes the rest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from specwhisper.cli import main


def _cli(*args: str) -> list[str]:
    # SIGINT handled as in a terminal: a shell starts a background job (CI run with ``&``, say) with
    # SIGINT ignored, and Python keeps it ignored, so the interrupt never reached the CLI there
    return [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from specwhisper.cli import main; sys.exit(main(sys.argv[1:]))", *args]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_interrupted_batch_keeps_whole_files_and_resumes(tiny_model_dir, shared_data, tmp_path, sig, code):
    clip = shared_data / "real/audio/jfk.flac"
    inputs = []
    for i in range(4):  # the first is written, then the interrupt; one or more are left for the resume
        inputs.append(tmp_path / f"clip{i}.flac")
        shutil.copy(clip, inputs[-1])
    out = tmp_path / "out"
    args = ["transcribe", *map(str, inputs), "--model", str(tiny_model_dir), "--language", "en",
            "--output-format", "json", "--output-dir", str(out), "--threads", "2",
            "--encoder", "ct2"]  # interruption is tested: no encoder choice to measure in a fresh cache
    proc = subprocess.Popen(_cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "clip0.json").exists():  # interrupt once the first file is written
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "no output within 300 s"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err
    written = sorted(p.name for p in out.iterdir())
    assert all(name.endswith(".json") for name in written), written  # no temporary file left behind
    assert 1 <= len(written) < len(inputs), written
    for name in written:
        assert json.loads((out / name).read_text())["text"].strip()  # whole files only

    if sig == signal.SIGINT:
        return  # resuming does not depend on how the run ended: once, after SIGTERM
    done = {name: os.stat(out / name).st_mtime_ns for name in written}
    resumed = subprocess.run(_cli(*args, "--skip-existing"), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stderr.count("skipped (--skip-existing)") == len(written)
    assert sorted(p.name for p in out.iterdir()) == [f"clip{i}.json" for i in range(len(inputs))]
    assert all(os.stat(out / name).st_mtime_ns == mtime for name, mtime in done.items())  # not written again


def test_skip_existing_needs_output_files(tmp_path, capsys):
    assert main(["transcribe", str(tmp_path / "a.flac"), "--skip-existing"]) == 2
    assert "--skip-existing needs output files" in capsys.readouterr().err


def test_skip_existing_with_everything_done_loads_no_model(tmp_path, capsys):
    (tmp_path / "a.json").write_text("{}")
    assert main(["transcribe", str(tmp_path / "a.flac"), "--output-format", "json", "--output-dir", str(tmp_path),
                 "--model", str(tmp_path / "no-such-model"), "--skip-existing"]) == 0
    assert "skipped (--skip-existing)" in capsys.readouterr().err


def test_two_inputs_with_one_output_name_are_refused_before_any_work(tmp_path, capsys):
    """Outputs are named by the file's stem: a second x.flac would overwrite the first's x.txt."""
    for folder in ("d1", "d2"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.flac").write_bytes(b"not read: refused first")
    out = tmp_path / "out"
    rc = main(["transcribe", str(tmp_path / "d1/x.flac"), str(tmp_path / "d2/x.flac"), "--output-dir", str(out),
               "--model", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err
    assert rc == 2 and "two inputs would write the same outputs (x.*)" in err and "different --output-dir" in err
    assert not out.exists()


def test_an_unusable_output_folder_is_refused_first_and_a_failed_write_loses_only_its_file(tmp_path, shared_data,
                                                                                            tiny_model_dir, capsys):
    """An --output-dir under a file was found after the model loaded and the first file decoded;
    a write that failed (a folder in the way, a full disk) ended the run, every later file
    untried. The folder is now checked first; a failed write fails its file, the rest go on."""
    (tmp_path / "a-file").write_text("in the way")
    rc = main(["transcribe", str(tmp_path / "a.flac"), "--output-format", "srt", "--output-dir",
               str(tmp_path / "a-file" / "sub"), "--model", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot write to the output folder" in err and "no-such-model" not in err
    jfk = shared_data / "real/audio/jfk.flac"
    for name in ("first", "second"):
        shutil.copy(jfk, tmp_path / f"{name}.flac")
    out = tmp_path / "out"
    (out / "first.srt").mkdir(parents=True)  # the first file's output cannot be written
    rc = main(["transcribe", str(tmp_path / "first.flac"), str(tmp_path / "second.flac"), "--output-format", "srt",
               "--output-dir", str(out), "--model", str(tiny_model_dir), "--language", "en", "--encoder", "ct2"])
    err = capsys.readouterr().err
    assert rc == 1 and "cannot write the srt output" in err and "first.srt" in err
    assert "country" in (out / "second.srt").read_text()


def test_bad_thread_counts_and_unwritable_learn_save_are_refused_before_any_work(tmp_path, capsys):
    for command in (["doctor", "--model", "tiny.en"], ["transcribe", str(tmp_path / "a.flac")]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--threads", "-1"])
        assert exit_info.value.code == 2 and "--threads: must be a whole number of at least 1" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("in the way")
    # a whole run's learning would be lost to a path found unwritable at its end: refused first
    rc = main(["transcribe", str(tmp_path / "a.flac"), "--learn", "--learn-save", str(tmp_path / "a-file/x.tmap"),
               "--model", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot write the learned token map" in err and "--learn-save" in err


def test_standard_streams_that_fail_as_a_script_meets_them(tiny_model_dir, shared_data, tmp_path, monkeypatch, capsys):
    """A shell-script user: ``2>&1 | head -1`` (stderr closed by its reader) ended the run at the next
    progress line with exit 0 and one of two files written; ``> /dev/full`` printed a traceback;
    ``>&-`` lost the text with exit 0. Diagnostics that cannot be written are dropped and the work goes
    on; a stdout that cannot take the text is one error, exit 1."""
    clip = shared_data / "real/audio/jfk.flac"
    inputs = [tmp_path / f"clip{i}.flac" for i in range(2)]
    for path in inputs:
        shutil.copy(clip, path)
    args = ["transcribe", *map(str, inputs), "--model", str(tiny_model_dir), "--language", "en", "--threads", "2",
            "--encoder", "ct2"]
    out = tmp_path / "out"
    proc = subprocess.Popen(_cli(*args, "-f", "json", "-o", str(out)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.stderr.close()  # the reader of stderr is gone before the first line
    assert proc.wait(300) == 0
    assert sorted(p.name for p in out.iterdir()) == ["clip0.json", "clip1.json"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(_cli(*args), stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert "error: cannot write to standard output: No space left on device" in done.stderr
    with monkeypatch.context() as closed:
        closed.setattr(sys, "stdout", None)  # what Python makes of a closed descriptor 1 (>&-)
        assert main(args[:2] + args[3:]) == 1
    assert "standard output is closed" in capsys.readouterr().err
    with monkeypatch.context() as closed:
        closed.setattr(sys, "stderr", None)  # 2>&-: every command failed on sys.stderr.isatty()
        assert main(args[:2] + args[3:]) == 0
    assert "ask not what your country" in capsys.readouterr().out


def test_transcribe_reads_a_file_piped_into_standard_input(tiny_model_dir, shared_data, tmp_path):
    """`ffmpeg ... -f wav - | specwhisper transcribe -` was refused ("transcribe reads files"), while
    /dev/stdin worked with raw errors for an empty pipe. '-' reads standard input whole; its outputs
    are named stdin; an empty pipe is said before the model loads."""
    clip = shared_data / "real/audio/jfk.flac"
    args = ["transcribe", "-", "--model", str(tiny_model_dir), "--language", "en", "--threads", "2", "--encoder", "ct2"]
    done = subprocess.run(_cli(*args, "-f", "json", "-o", str(tmp_path)), input=clip.read_bytes(),
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "stdin.json").read_text())
    assert "ask not what your country" in written["text"] and written["input"] == "-"
    # -o -: the output on stdout (| jq), no file; subtitles of several inputs would run together
    done = subprocess.run(_cli(*args, "-f", "json", "-o", "-"), input=clip.read_bytes(), capture_output=True,
                          timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["text"] == written["text"]
    several = subprocess.run(_cli("transcribe", str(clip), str(clip.with_name("x.flac")), "-f", "srt", "-o", "-"),
                             capture_output=True, text=True, timeout=300)
    assert several.returncode == 2 and "subtitles of 2 inputs would run together" in several.stderr
    empty = subprocess.run(_cli(*args), input=b"", capture_output=True, text=False, timeout=300)
    assert empty.returncode == 1 and b"standard input is empty" in empty.stderr and b"Traceback" not in empty.stderr
