"""``specwhisper batch`` (issue 22): inputs expanded and checked, outputs equal to a sequential run
token for token whichever runner made them (process pool, Ray), resumable, a killed worker replaced,
a bad file reported without losing the others."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import load_manifest
from specwhisper.batch import transcribe_batch
from specwhisper.batch.inputs import expand_inputs
from specwhisper.batch.ledger import LEDGER_DIR
from specwhisper.cli import main
from specwhisper.errors import SpecWhisperError


def _clips(shared_data: Path, tmp_path: Path, count: int) -> Path:
    """``count`` clips of the shared sets (sentences and read speech, shortest first) copied into
    one folder with a nested subfolder, so that names keep their subfolders."""
    rows = load_manifest(shared_data / "real" / "manifest.jsonl") + load_manifest(shared_data / "read" / "manifest.jsonl")
    rows = sorted((r for r in rows if r.get("kind") != "digit"), key=lambda r: r["duration_s"])
    folder = tmp_path / "audio"
    for index, row in enumerate(rows[:count]):
        target = folder / ("sub" if index % 3 == 0 else "") / Path(row["path"]).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(row["path"], target)
    return folder


def _tokens(output_dir: Path) -> dict[str, list[int]]:
    return {str(p.relative_to(output_dir)): json.loads(p.read_text())["tokens"]
            for p in sorted(output_dir.rglob("*.json")) if LEDGER_DIR not in p.parts}


def _options(tiny_model_dir: Path) -> dict:
    # the default two threads a worker for every runner (two workers share the 2 cores): the reference
    # is a sequential run with the same threads. (One thread a worker cost a fresh run ~30 s of
    # measuring tiny.en on 1 thread, for a pool 10 % faster.)
    return dict(model=str(tiny_model_dir), language="en", threads_per_worker=2)


# ---- inputs: checked before any model loads -------------------------------------------------

def test_folders_globs_and_manifests_expand_with_names_that_keep_subfolders(tmp_path, shared_data):
    folder = _clips(shared_data, tmp_path, 6)
    items = expand_inputs([str(folder)])
    assert len(items) == 6 and any(item.name.startswith("sub/") for item in items)
    assert all(item.duration_s and item.duration_s > 0 for item in items)
    assert [i.path for i in expand_inputs([str(folder / "*.flac")])] == sorted(str(p) for p in folder.glob("*.flac"))
    first, second = sorted(folder.glob("*.flac"))[:2]
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text(json.dumps({"path": os.path.relpath(first, tmp_path), "name": "calls/one"}) + "\n\n"
                     + json.dumps({"path": str(second)}) + "\n")
    assert [(i.path, i.name) for i in expand_inputs([str(jsonl)])] == [(str(first), "calls/one"),
                                                                       (str(second), second.stem)]
    csv = folder / "m.csv"
    csv.write_bytes(f"\ufeffpath,name\n{first.name},x\n".encode())  # a spreadsheet's byte-order mark
    assert [i.name for i in expand_inputs([str(csv)])] == ["x"]
    assert len(expand_inputs([str(folder / "*")])) == 4  # a glob takes audio files only, not m.csv
    assert len(expand_inputs([str(first), str(first), f"{folder}/./{first.name}"])) == 1  # once, however named


def test_a_linked_subfolder_is_followed_and_a_link_loop_ends(tmp_path):
    """An archive linking its older years in: ``rglob`` skipped the linked folder's files without a word."""
    (tmp_path / "arch" / "new").mkdir(parents=True)
    (tmp_path / "old").mkdir()
    (tmp_path / "arch" / "new" / "x.flac").write_bytes(b"")
    (tmp_path / "old" / "y.flac").write_bytes(b"")
    (tmp_path / "arch" / "old").symlink_to(tmp_path / "old")
    (tmp_path / "arch" / "new" / "loop").symlink_to(tmp_path / "arch")
    assert [item.name for item in expand_inputs([str(tmp_path / "arch")])] == ["new/x", "old/y"]


@pytest.mark.parametrize("manifest, message", [
    ('{"path": "missing.flac"}\n', "not there"),
    ("not json\n", "not JSON"),
    ('{"name": "x"}\n', "without a path"),
    ('{"path": "a.flac", "name": "../escape"}\n', "relative path inside the output folder"),
    ('{"path": "a.flac", "name": "."}\n', "relative path inside the output folder"),  # was an IndexError
    ('{"path": "a.flac", "name": "calls/"}\n', "relative path inside the output folder"),  # wrote calls/.json
])
def test_a_bad_manifest_line_is_named_with_its_line(tmp_path, manifest, message):
    (tmp_path / "a.flac").write_bytes(b"")
    path = tmp_path / "m.jsonl"
    path.write_text(manifest)
    with pytest.raises(SpecWhisperError) as err:
        expand_inputs([str(path)])
    assert message in err.value.what and f"{path}:1" in err.value.where


def test_two_inputs_for_one_name_and_missing_inputs_are_errors(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "x.flac").write_bytes(b"")
    with pytest.raises(SpecWhisperError, match="same outputs"):
        expand_inputs([str(tmp_path / "a" / "x.flac"), str(tmp_path / "b" / "x.flac")])
    assert len(expand_inputs([str(tmp_path)])) == 2  # a folder keeps a/x and b/x apart
    with pytest.raises(SpecWhisperError, match="no such file"):
        expand_inputs([str(tmp_path / "nope.flac")])
    with pytest.raises(SpecWhisperError, match="matches no audio file"):
        expand_inputs([str(tmp_path / "*.wav")])
    (tmp_path / "a" / "Y.flac").write_bytes(b"")
    (tmp_path / "b" / "y.wav").write_bytes(b"")
    with pytest.raises(SpecWhisperError, match="same outputs"):  # one file on macOS and Windows
        expand_inputs([str(tmp_path / "a" / "Y.flac"), str(tmp_path / "b" / "y.wav")])
    manifest = tmp_path / "m.jsonl"  # two rows for one name: the error names the second row
    manifest.write_text('{"path": "a/x.flac", "name": "n"}\n{"path": "b/x.flac", "name": "n"}\n')
    with pytest.raises(SpecWhisperError, match="same outputs") as err:
        expand_inputs([str(manifest)])
    assert err.value.where == f"{manifest}:2" and "manifest row" in err.value.hint
    # one output path spelt three ways: three calls wrote one file, and the job said all were done
    manifest.write_text('{"path": "a/x.flac", "name": "c/n"}\n{"path": "b/x.flac", "name": "c/./n"}\n')
    with pytest.raises(SpecWhisperError, match=r"same outputs \(c/n\.\*\)"):
        expand_inputs([str(manifest)])
    manifest.write_text('{"path": "a/x.flac", "name": "c//n"}\n')
    assert [item.name for item in expand_inputs([str(manifest)])] == ["c/n"]
    table = tmp_path / "m.csv"  # an unquoted comma made a third field, which was dropped
    table.write_text("path,name\na/x.flac,one\nb/x.flac,two,three\n")
    with pytest.raises(SpecWhisperError, match="3 fields under a header of 2") as err:
        expand_inputs([str(table)])
    assert err.value.where == f"{table}:3"


def test_cli_refuses_bad_options_before_loading_a_model(tmp_path, capsys):
    (tmp_path / "a.flac").write_bytes(b"")
    (tmp_path / "file").write_text("")
    for extra, message in ((["--output-format", "json,docx"], "unknown output format docx"),
                           (["--workers", "0"], "--workers must be at least 1"),
                           (["--retries", "-1"], "--retries must be at least 0"),
                           (["--model", str(tmp_path / "no-model")], "no-model"),
                           (["--tokenmap", str(tmp_path / "none.tmap")], "none.tmap")):
        assert main(["batch", str(tmp_path / "a.flac"), "--output-dir", str(tmp_path / "o"), *extra]) == 2
        assert message in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["batch", str(tmp_path / "bad.jsonl"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing made for a job that never started
    assert main(["batch", str(tmp_path / "a.flac"), "--output-dir", str(tmp_path / "file" / "o")]) == 2
    assert "cannot write to the output folder" in capsys.readouterr().err
    with pytest.raises(TypeError, match="threads_per_worker"):
        transcribe_batch([str(tmp_path / "a.flac")], str(tmp_path / "o"), threads=4)
    # a notebook user's keywords (a helper): a typo and an on/off flag given as a string are one
    # clear error before anything runs ("false" ran as on, or failed file by file)
    from specwhisper.errors import OptionError, UnknownOptionError

    with pytest.raises(UnknownOptionError, match="languag") as caught:
        transcribe_batch([str(tmp_path / "a.flac")], str(tmp_path / "o"), languag="en")
    assert "threads_per_worker" in caught.value.hint and "output_format" not in caught.value.hint
    for flag in ("no_speculation", "vad", "condition_on_previous_text"):
        with pytest.raises(OptionError, match=flag):
            transcribe_batch([str(tmp_path / "a.flac")], str(tmp_path / "o"), **{flag: "false"})
    assert not (tmp_path / "o").exists()


def test_a_second_job_into_a_folder_in_use_stops_at_once_naming_the_first(tmp_path, capsys):
    """Two jobs into one folder raced on its recorded decisions and decoded the same inputs twice:
    while one job's process holds the folder, another stops before any model loads; once it
    ends, the folder is free again."""
    import subprocess
    import sys

    from specwhisper.batch.folder_lock import held_by_this_job

    (tmp_path / "a.flac").write_bytes(b"")
    ledger = tmp_path / "o" / LEDGER_DIR
    ledger.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom specwhisper.batch.folder_lock import "
                               f"held_by_this_job\nwith held_by_this_job({str(ledger)!r}):\n print('held', flush=True)\n"
                               " sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["batch", str(tmp_path / "a.flac"), "--output-dir", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert "another batch job is writing to this output folder" in err and f"pid {holder.pid}" in err
    finally:
        holder.communicate("")
    with held_by_this_job(ledger):  # the lock went with the process
        pass


def test_a_ray_address_where_nothing_answers_is_a_clear_error_at_once(tmp_path, capsys):
    """Ray retries an address where no cluster runs for minutes, printing only its own warnings
    (a --ray 127.0.0.1:1 job was still waiting after 60 s): refused before anything starts."""
    pytest.importorskip("ray.data", reason="Ray is not installed (the [ray] extra)")
    (tmp_path / "a.flac").write_bytes(b"")
    start = time.perf_counter()
    assert main(["batch", str(tmp_path / "a.flac"), "--output-dir", str(tmp_path / "o"), "--ray", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach a Ray cluster at 127.0.0.1:1" in err and "--ray 127.0.0.1:1" in err
    assert time.perf_counter() - start < 30 and not (tmp_path / "o").exists()


# ---- runs on real audio ----------------------------------------------------------------------

def test_process_pool_equals_sequential_resumes_and_redoes_what_changed(tmp_path, shared_data, tiny_model_dir):
    folder = _clips(shared_data, tmp_path, 4)  # two in a subfolder
    options = _options(tiny_model_dir)
    seq = transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json", "srt"), **options)
    pool = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "srt"), workers=2, **options)
    assert seq.ok and pool.ok and len(seq.outcomes) == 4
    # every input decoded in a pool process, never the driver's; which process takes which input is
    # the scheduler's: one that loads late can find every input taken (CI saw one process do all of 8)
    workers = {o.worker for o in pool.outcomes}
    assert 1 <= len(workers) <= 2 and all(int(w.rsplit(":", 1)[1]) != os.getpid() for w in workers)
    reference = _tokens(tmp_path / "seq")
    assert len(reference) == 4 and any(reference.values())
    assert _tokens(tmp_path / "pool") == reference
    srt = sorted(str(p.relative_to(tmp_path / "pool")) for p in (tmp_path / "pool").rglob("*.srt"))
    assert srt == sorted(name.replace(".json", ".srt") for name in reference)

    again = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "srt"), workers=2, **options)
    assert [o.status for o in again.outcomes] == ["skipped"] * 4
    assert all(o.worker == "driver" for o in again.outcomes)  # verified without loading a model
    fewer = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("srt",), **options)
    assert [o.status for o in fewer.outcomes] == ["skipped"] * 4  # formats recorded: nothing to redo
    more = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "txt"), **options)
    assert [o.status for o in more.outcomes] == ["done"] * 4  # a format not recorded: run again
    assert len(list((tmp_path / "pool").rglob("*.txt"))) == 4
    # the srt of the first run is whole and still recorded: a run in other formats kept it (json,
    # then txt, then json again decoded every input three times)
    assert [o.status for o in transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("srt",),
                                               **options).outcomes] == ["skipped"] * 4
    edited = next((tmp_path / "pool").rglob("*.txt"))
    edited.write_text("edited by hand\n")  # a format this rerun does not ask for: not read
    assert [o.status for o in transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json",),
                                               **options).outcomes] == ["skipped"] * 4
    transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "srt"), **options)

    victim = next((tmp_path / "pool").rglob("*.srt"))
    victim.write_text(victim.read_text()[:-5])  # an output cut short is not whole: done again
    third = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "srt"), **options)
    assert sorted(o.status for o in third.outcomes) == ["done"] + ["skipped"] * 3
    assert _tokens(tmp_path / "pool") == reference
    changed = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json", "srt"),
                               **(options | {"timestamps": "on"}))  # an option that changes the text
    assert [o.status for o in changed.outcomes] == ["done"] * 4


def test_a_killed_pool_process_is_replaced_and_the_job_completes(tmp_path, shared_data, tiny_model_dir):
    folder = _clips(shared_data, tmp_path, 4)
    options = _options(tiny_model_dir)
    transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json",), **options)
    killed: list[int] = []

    def kill_first_worker(outcome) -> None:
        if not killed:
            killed.append(int(outcome.worker.rsplit(":", 1)[1]))
            os.kill(killed[0], signal.SIGKILL)

    report = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json",), workers=2,
                              on_outcome=kill_first_worker, **options)
    assert killed and report.ok
    assert _tokens(tmp_path / "pool") == _tokens(tmp_path / "seq")
    assert not list((tmp_path / "pool").rglob("*.tmp"))
    _assert_pools_end()


def test_auto_is_settled_once_for_the_job_and_every_worker_decodes_in_it(tmp_path, shared_data, tiny_model_dir,
                                                                          monkeypatch, capsys):
    """Under auto a window's numerics follow what its engine learned from earlier files and timings
    each process may measure differently: a batch settles them once, records them, and a pool's
    processes decode in the driver's decisions, not in their own."""
    from specwhisper.batch import decisions as decisions_module

    folder = _clips(shared_data, tmp_path, 4)
    options = _options(tiny_model_dir)
    seq = transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json",), **options)
    settled = seq.decisions
    assert settled is not None and settled.numerics in ("single-row", "batch-invariant")
    assert settled.encoder in ("ct2", "onnx", "openvino") and settled.why
    for path in (tmp_path / "seq").glob("*.json"):
        data = json.loads(path.read_text())
        assert data["batch_decisions"] == settled.to_dict() and data["encoder"] == settled.encoder
        assert {w["numerics"] for w in data["windows"]} == {settled.numerics}

    other = "single-row" if settled.numerics == "batch-invariant" else "batch-invariant"
    forced = decisions_module.JobDecisions(other, "forced by the test", "ct2", "auto")
    monkeypatch.setattr(decisions_module, "decide", lambda engine, settings: forced)
    pool = transcribe_batch([str(folder)], str(tmp_path / "pool"), formats=("json",), workers=2, **options)
    assert pool.ok and pool.decisions == forced
    for path in (tmp_path / "pool").glob("*.json"):
        data = json.loads(path.read_text())
        decoded = other if other == "single-row" or data["row_floor"] is not None else "single-row"
        assert data["encoder"] == "ct2" and {w["numerics"] for w in data["windows"]} == {decoded}

    # A resume decodes in what the folder's first run settled: with other workers or threads it
    # settled afresh (two numerics in one folder, found by a user's helper); here auto would now say
    # the other numerics (``decide`` is still forced), and the input done again must not follow it.
    redo = sorted((tmp_path / "seq").glob("*.json"))[0]
    redo.unlink()
    # ("EN" keys the job as "en" does: only the deleted output is done again)
    resumed = transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json",), **(options | {"language": "EN"}))
    assert resumed.ok and resumed.decisions == settled
    assert sum(o.status == "done" for o in resumed.outcomes) == 1
    data = json.loads(redo.read_text())
    assert data["batch_decisions"] == settled.to_dict() and {w["numerics"] for w in data["windows"]} == {settled.numerics}
    # a record that cannot open here (an encoder this machine lacks; a name no build has, here) is
    # said and settled afresh, not a failure of every input
    record = tmp_path / "seq" / LEDGER_DIR / "decisions.job"
    record.write_text(json.dumps({k: dict(v, encoder="no-such-encoder") for k, v in json.loads(record.read_text()).items()}))
    redo.unlink()
    with pytest.warns(UserWarning, match="cannot open here.*settled afresh"):
        again = transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json",), **options)
    assert again.ok and again.decisions == forced and json.loads(redo.read_text())["batch_decisions"] == forced.to_dict()
    monkeypatch.undo()

    assert main(["batch", str(folder), "--output-dir", str(tmp_path / "cli"), "--model", str(tiny_model_dir),
                 "--threads", "2", "--language", "en"]) == 0
    assert f"decoded in {settled.numerics} numerics ({settled.why}), encoder {settled.encoder}" in capsys.readouterr().err


def _put_values(worker: int, start) -> None:
    from specwhisper.measure_cache import cache_put

    start.wait(60)
    for value in range(40):
        cache_put(f"test-{worker}-{value}", value)


def test_processes_writing_the_self_test_cache_at_once_keep_every_value(tmp_path, monkeypatch):
    """A pool's processes measure and cache at once: none may drop what another wrote (without the
    lock, 4 processes writing 40 values each at once kept about a third of them)."""
    from specwhisper.measure_cache import cache_get

    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Event()
    processes = [spawn.Process(target=_put_values, args=(w, start)) for w in range(4)]
    for process in processes:
        process.start()
    time.sleep(1.0)  # every process imported and waiting: they write at once
    start.set()
    for process in processes:
        process.join(60)
    assert [p.exitcode for p in processes] == [0] * 4
    assert all(cache_get(f"test-{w}-{v}") == v for w in range(4) for v in range(40))


def _assert_pools_end(within_s: float = 30.0) -> None:
    """Every pool the job made, the dead one too, has ended its processes and its manager thread:
    otherwise the interpreter hangs at exit joining it (a survivor that the broken pool sent
    SIGTERM while it was transcribing once went back to wait on a queue lock the killed one held)."""
    from concurrent.futures.process import _ExecutorManagerThread

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        managers = [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]
        if not managers and not multiprocessing.active_children():
            return
        time.sleep(0.2)
    raise AssertionError(f"pools left running: {managers}, processes {multiprocessing.active_children()}")


def test_a_bad_file_is_reported_and_the_others_are_written(tmp_path, shared_data, tiny_model_dir, capsys):
    folder = _clips(shared_data, tmp_path, 3)
    (folder / "broken.flac").write_bytes(b"fLaC" + os.urandom(400))
    code = main(["batch", str(folder), "--output-dir", str(tmp_path / "out"), "--model", str(tiny_model_dir),
                 "--threads", "2", "--output-format", "TXT,json,json", "--language", "en"])  # each once
    err = capsys.readouterr().err
    assert code == 1 and len(list((tmp_path / "out").rglob("*.txt"))) == 3
    assert "failed: " in err and "broken.flac" in err and "3 transcribed" in err and "1 failed" in err
    assert len(list((tmp_path / "out").rglob("*.json"))) == 3 + 3  # outputs and their ledger records
    assert not list((tmp_path / "out").rglob("broken.*"))


# ---- Ray: a local cluster -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (the [ray] extra)")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (the [ray] extra)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_equals_a_local_run_survives_a_killed_worker_and_resumes(local_ray, tmp_path, shared_data,
                                                                        tiny_model_dir):
    folder = _clips(shared_data, tmp_path, 10)
    options = _options(tiny_model_dir)
    transcribe_batch([str(folder)], str(tmp_path / "seq"), formats=("json",), **options)
    killed: list[str] = []
    lock = threading.Lock()

    def kill_first_worker(outcome) -> None:
        with lock:
            if not killed and outcome.status == "done":
                killed.append(outcome.worker)
                os.kill(int(outcome.worker.rsplit(":", 1)[1]), signal.SIGKILL)

    report = transcribe_batch([str(folder)], str(tmp_path / "ray"), formats=("json", "parquet"), ray="auto",
                              workers=2, on_outcome=kill_first_worker, **options)
    assert killed and report.ok, [o.error for o in report.failed]
    assert len({o.worker for o in report.outcomes} - set(killed)) >= 2  # a fresh actor took over
    assert _tokens(tmp_path / "ray") == _tokens(tmp_path / "seq")

    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "ray" / "transcripts.parquet").to_pylist()
    by_name = {row["name"]: row for row in table}
    assert len(by_name) == 10
    for rel, tokens in _tokens(tmp_path / "seq").items():
        assert by_name[rel[: -len(".json")]]["tokens"] == tokens

    again = transcribe_batch([str(folder)], str(tmp_path / "ray"), formats=("json", "parquet"), ray="auto",
                             workers=2, **options)
    assert [o.status for o in again.outcomes] == ["skipped"] * 10


def test_stitched_times_stay_within_their_piece():
    """A piece's windows can stamp times into the padding after its last sample (tiny.en looping
    on digits ran 0.44 s past a cut in the long-form file): stitched, those times stop at the cut,
    so the next piece's segments never start before the last one's."""
    from specwhisper.batch.inputs import BatchItem
    from specwhisper.batch.pieces import stitch

    def piece(start, end, spans):
        item = BatchItem(path="f.flac", name=f"f@{start}", start_s=start, end_s=end, parent="f")
        segments = [{"start_s": a, "end_s": b, "text": f" {a}", "words": [
            {"start": a, "end": b, "word": f" {a}", "probability": 0.5}]} for a, b in spans]
        return item, {"tokens": [1], "text": "x", "segments": segments, "language": "en"}

    done = stitch([piece(0.0, 10.0, [(0.0, 9.0), (9.0, 10.5), (10.2, 11.0)]), piece(10.0, 20.0, [(0.0, 4.0)])], "vad")
    spans = [(seg.start_s, seg.end_s) for seg in done.segments]
    assert spans == [(0.0, 9.0), (9.0, 10.0), (10.0, 10.0), (10.0, 14.0)]
    assert [(w.start, w.end) for seg in done.segments for w in seg.words] == spans


def test_a_long_file_cut_into_pieces_is_stitched_with_its_times(tmp_path, shared_data, tiny_model_dir):
    """Pieces cut inside silences, decoded by two processes, stitched: the file's tokens are its
    pieces' tokens (each the same as that stretch transcribed alone with timestamps, as the whole
    file is), times shifted into the file's."""
    import soundfile as sf

    from specwhisper import WhisperEngine
    from specwhisper.audio import SAMPLE_RATE, load_audio

    # the long-form file's first 105 s (its 150 s decoded twice cost 21 s), in pieces of about 30 s,
    # one of them shorter than a window
    audio = tmp_path / "in" / "longform.flac"
    audio.parent.mkdir()
    sf.write(audio, load_audio(shared_data / "longform" / "longform.flac")[:105 * SAMPLE_RATE], SAMPLE_RATE)
    options = _options(tiny_model_dir)
    report = transcribe_batch([str(audio)], str(tmp_path / "out"), formats=("json", "vtt"), workers=2, piece_s=30,
                              **options)
    assert report.ok and [o.name for o in report.outcomes] == ["longform"]
    data = json.loads((tmp_path / "out" / "longform.json").read_text())
    pieces = data["pieces"]
    assert data["cut_by"] == "vad" and len(pieces) >= 2
    assert pieces[0]["start_s"] == 0 and abs(pieces[-1]["end_s"] - data["duration_s"]) < 1e-3
    assert all(a["end_s"] == b["start_s"] for a, b in zip(pieces, pieces[1:]))
    starts = [s["start_s"] for s in data["segments"]]
    assert starts == sorted(starts) and data["segments"][-1]["end_s"] > pieces[-1]["start_s"]

    waveform = load_audio(audio)
    settled = data["batch_decisions"]  # what auto settled for the job: the reference decodes in it too
    engine = WhisperEngine(str(tiny_model_dir), threads=2, encoder=settled["encoder"],
                           batch_decoder=settled["batch_decoder"])
    alone = []
    for piece in pieces:
        stretch = waveform[round(piece["start_s"] * SAMPLE_RATE):round(piece["end_s"] * SAMPLE_RATE)]
        # with timestamps, as the whole file has them: a piece under 30 s lost them, its text one cue
        alone += engine.transcribe(stretch, language="en", numerics=settled["numerics"], timestamps="on").tokens
    engine.close()
    assert data["tokens"] == alone
    assert not list((tmp_path / "out" / LEDGER_DIR / "pieces").glob("*.json"))  # spent once stitched
    assert any(p["end_s"] - p["start_s"] < 30 for p in pieces), pieces  # a piece decoded as a clip of its own would lose them
    assert len(data["segments"]) > 2 * len(pieces)
    again = transcribe_batch([str(audio)], str(tmp_path / "out"), formats=("json", "vtt"), workers=2, piece_s=30,
                             **options)
    assert [o.status for o in again.outcomes] == ["skipped"]


def test_every_batch_option_is_either_in_the_resume_key_or_speed_only():
    from specwhisper.batch import batch_settings
    from specwhisper.batch.ledger import SPEED_OPTIONS, TEXT_OPTIONS

    options = set(vars(batch_settings())) - {"formats"}
    assert options - set(TEXT_OPTIONS) - set(SPEED_OPTIONS) == set()
    assert not set(TEXT_OPTIONS) & set(SPEED_OPTIONS)


def test_the_resume_key_holds_the_options_changed_from_their_defaults_only(monkeypatch):
    """An upgrade that added options to the key (at defaults that keep the text) redid a whole
    archive: the key holds only options that differ from their defaults, so it does not move."""
    import specwhisper.batch.ledger as ledger
    from specwhisper.batch import batch_settings

    defaults = vars(batch_settings())
    assert ledger.settings_key(defaults) == ledger.settings_key({})
    assert ledger.settings_key({"language": "de"}) == ledger.settings_key({**defaults, "language": "de"})
    assert ledger.settings_key({"language": "de"}) != ledger.settings_key({})
    assert ledger.settings_key({"seed": 7}) != ledger.settings_key({"seed": 8})
    before = ledger.settings_key({**defaults, "beam_size": 5})
    monkeypatch.setattr(ledger, "TEXT_OPTIONS", ledger.TEXT_OPTIONS + ("an_option_of_a_later_version",))
    assert ledger.settings_key({**defaults, "beam_size": 5}) == before
    monkeypatch.setattr(ledger, "TEXT_DEFAULTS_VERSION", ledger.TEXT_DEFAULTS_VERSION + 1)  # a default's text changed
    assert ledger.settings_key({**defaults, "beam_size": 5}) != before


@pytest.mark.full
def test_every_shared_clip_on_ray_equals_the_local_runs(local_ray, tmp_path, shared_data, tiny_model_dir):
    """The real and read sets and the long-form files (the latter also in pieces of 60 s) on Ray with
    two workers, against a sequential run and the local process pool: token for token."""
    sets = [shared_data / "real" / "audio", shared_data / "read" / "audio", shared_data / "longform"]
    inputs = [str(s) for s in sets]
    options = _options(tiny_model_dir)
    runs = {}
    for label, extra in (("seq", {}), ("pool", {"workers": 2}), ("ray", {"workers": 2, "ray": "auto"}),
                         ("ray-pieces", {"workers": 2, "ray": "auto", "piece_s": 60})):
        report = transcribe_batch(inputs, str(tmp_path / label), formats=("json",), **extra, **options)
        assert report.ok, [o.error for o in report.failed]
        runs[label] = _tokens(tmp_path / label)
    assert len(runs["seq"]) == 107 + 173 + 2
    assert runs["pool"] == runs["seq"] and runs["ray"] == runs["seq"]
    cut = {name for name in runs["seq"] if name.startswith(("longform", "ljspeech_LJ001-0001_to"))}
    assert {k: v for k, v in runs["ray-pieces"].items() if k not in cut} == \
        {k: v for k, v in runs["seq"].items() if k not in cut}  # files under 90 s are not cut


def test_a_resumed_batch_shows_no_rate_before_it_transcribes_anything():
    """A rerun's first lines (inputs skipped: their outputs were there) said "0.0x real time"."""
    import io

    from specwhisper.batch.progress import BatchProgress
    from specwhisper.batch.worker import Outcome

    shown = io.StringIO()
    progress = BatchProgress(total_files=3, total_audio_s=1800.0, stream=shown)
    progress.update(Outcome("a.flac", "a", "skipped", audio_s=600.0))
    assert "real time" not in shown.getvalue() and "0.17/0.50 h audio" in shown.getvalue()
    progress.update(Outcome("b.flac", "b", "done", audio_s=600.0, wall_s=60.0))
    assert "x real time" in shown.getvalue().splitlines()[-1]
