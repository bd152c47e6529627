"""Reader and streaming writer for CTranslate2's ``model.bin`` (binary versions 4 to 6), without torch.

Layout (see CTranslate2 python/ctranslate2/specs/model_spec.py, ``ModelSpec._serialize``), all
little-endian: u32 binary version, string spec name, u32 spec revision, u32 variable count, then per
variable: string name, u8 rank, u32 x rank shape, u8 dtype id, u32 payload bytes, payload; then u32
alias count and (alias, target) string pairs. A string is u16 length (with the NUL) + bytes + NUL.

The reader only indexes the file; payloads are read one variable at a time through a memory map so
that re-encoding a model never holds more than one tensor in memory.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from specwhisper.errors import ModelError

CURRENT_BINARY_VERSION = 6
MIN_BINARY_VERSION = 4  # older files store an item size instead of a dtype id
# Order of CTranslate2's DataType enum (include/ctranslate2/types.h). bfloat16 has no numpy dtype.
DTYPES: tuple[str, ...] = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
_NUMPY = {"float32": np.float32, "int8": np.int8, "int16": np.int16, "int32": np.int32, "float16": np.float16}


@dataclass(frozen=True)
class VariableInfo:
    """Where one variable's payload lies in the file."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class ModelBinIndex:
    """Everything in a ``model.bin`` except the payloads."""

    path: Path
    binary_version: int
    spec_name: str
    spec_revision: int
    variables: tuple[VariableInfo, ...]
    aliases: tuple[tuple[str, str], ...]

    def names(self) -> set[str]:
        return {v.name for v in self.variables}


class _Cursor:
    """Bounds-checked little-endian reads over a byte buffer; a short file becomes a ModelError."""

    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelError("model.bin is truncated or corrupt", where=str(self.path),
                             hint="re-download or re-convert the model")
        self.pos += n

    def take(self, n: int) -> bytes:
        start = self.pos
        self.skip(n)
        return self.buf[start:self.pos]

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self) -> str:
        (length,) = self.unpack("H")
        raw = self.take(length)
        if length == 0 or raw[-1] != 0:
            raise ModelError("model.bin has a malformed string", where=str(self.path),
                             hint="re-download or re-convert the model")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError("model.bin has a malformed string", where=str(self.path),
                             hint="re-download or re-convert the model") from None


def read_index(path: str | Path) -> ModelBinIndex:
    """Index ``model.bin`` (names, shapes, dtypes, payload offsets, aliases) without reading payloads."""
    path = Path(path)
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf, path), path)
    except FileNotFoundError:
        raise ModelError("model.bin not found", where=str(path),
                         hint="point at a CTranslate2 model directory (model.bin, config.json)") from None
    except ValueError:  # mmap of an empty file
        raise ModelError("model.bin is empty", where=str(path), hint="re-download or re-convert the model") from None


def _parse(cur: _Cursor, path: Path) -> ModelBinIndex:
    (version,) = cur.unpack("I")
    if not MIN_BINARY_VERSION <= version <= CURRENT_BINARY_VERSION:
        raise ModelError(
            f"model.bin binary version {version} is not supported (this reader knows {MIN_BINARY_VERSION}"
            f"-{CURRENT_BINARY_VERSION})",
            where=str(path),
            hint="re-convert the model with a current CTranslate2 (ct2-transformers-converter) or 'specwhisper convert'",
        )
    spec_name = cur.string()
    (revision,) = cur.unpack("I")
    (count,) = cur.unpack("I")
    variables = []
    for _ in range(count):
        name = cur.string()
        (rank,) = cur.unpack("B")
        shape = cur.unpack("I" * rank) if rank else ()
        type_id, nbytes = cur.unpack("BI")
        if type_id >= len(DTYPES):
            raise ModelError(f"model.bin variable {name!r} has unknown dtype id {type_id}", where=str(path),
                             hint="re-download or re-convert the model")
        dtype = DTYPES[type_id]
        expected = int(np.prod(shape, dtype=np.int64)) * (2 if dtype == "bfloat16" else np.dtype(_NUMPY[dtype]).itemsize)
        if nbytes != expected:
            raise ModelError(f"model.bin variable {name!r} has an invalid payload size", where=str(path),
                             hint="re-download or re-convert the model")
        variables.append(VariableInfo(name, tuple(int(d) for d in shape), dtype, cur.pos, nbytes))
        cur.skip(nbytes)
    (n_alias,) = cur.unpack("I")
    aliases = tuple((cur.string(), cur.string()) for _ in range(n_alias))
    if cur.pos != len(cur.buf):
        raise ModelError("model.bin has trailing bytes after the alias table", where=str(path),
                         hint="re-download or re-convert the model")
    return ModelBinIndex(path, version, spec_name, revision, tuple(variables), aliases)


class ModelBinReader:
    """Memory-mapped payload access for an indexed ``model.bin``; use as a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.index = read_index(path)
        self._fh = self.index.path.open("rb")
        self._buf = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)

    def __enter__(self) -> ModelBinReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._buf.close()
        self._fh.close()

    def array(self, info: VariableInfo) -> np.ndarray:
        """A private copy of one payload as a numpy array of its shape (bfloat16 is refused)."""
        if info.dtype == "bfloat16":
            raise ModelError(f"variable {info.name!r} is bfloat16, which numpy cannot hold",
                             where=str(self.index.path), hint="convert the source model to float16 or float32 first")
        dtype = np.dtype(_NUMPY[info.dtype])
        view = np.frombuffer(self._buf, dtype=dtype, count=info.nbytes // dtype.itemsize, offset=info.offset)
        out = view.reshape(info.shape).copy()
        del view  # release the export so the map can be closed
        return out

    def raw(self, info: VariableInfo) -> bytes:
        """The payload bytes of one variable, unparsed."""
        return self._buf[info.offset:info.offset + info.nbytes]

    def __iter__(self) -> Iterator[tuple[VariableInfo, np.ndarray]]:
        for info in self.index.variables:
            yield info, self.array(info)


class ModelBinWriter:
    """Writes ``model.bin`` one variable at a time: the variable count is fixed up front."""

    def __init__(self, fh: BinaryIO, spec_name: str, spec_revision: int, num_variables: int,
                 binary_version: int = CURRENT_BINARY_VERSION) -> None:
        self._fh = fh
        self._expected = num_variables
        self._written = 0
        fh.write(struct.pack("<I", binary_version))
        self._string(spec_name)
        fh.write(struct.pack("<II", spec_revision, num_variables))

    def _string(self, text: str) -> None:
        raw = text.encode("utf-8")
        self._fh.write(struct.pack("<H", len(raw) + 1) + raw + b"\0")

    def write(self, name: str, array: np.ndarray) -> None:
        dtype = np.dtype(array.dtype).name
        if dtype not in _NUMPY:
            raise ValueError(f"dtype {dtype} cannot be stored in model.bin")
        if self._written >= self._expected:
            raise ValueError("more variables written than announced")
        array = np.ascontiguousarray(array)
        self._string(name)
        self._fh.write(struct.pack("<B", array.ndim))
        if array.ndim:
            self._fh.write(struct.pack("<" + "I" * array.ndim, *array.shape))
        self._fh.write(struct.pack("<BI", DTYPES.index(dtype), array.nbytes))
        self._fh.write(array.data if array.ndim else array.tobytes())  # no copy of large tensors
        self._written += 1

    def write_raw(self, info: VariableInfo, payload: bytes | memoryview) -> None:
        """Copy a variable unchanged (any dtype, bfloat16 included)."""
        if self._written >= self._expected:
            raise ValueError("more variables written than announced")
        self._string(info.name)
        self._fh.write(struct.pack("<B", len(info.shape)))
        if info.shape:
            self._fh.write(struct.pack("<" + "I" * len(info.shape), *info.shape))
        self._fh.write(struct.pack("<BI", DTYPES.index(info.dtype), info.nbytes))
        self._fh.write(payload)
        self._written += 1

    def finish(self, aliases: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> None:
        if self._written != self._expected:
            raise ValueError(f"{self._written} variables written, {self._expected} announced")
        self._fh.write(struct.pack("<I", len(aliases)))
        for alias, target in aliases:
            self._string(alias)
            self._string(target)
