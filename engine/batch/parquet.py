"""Transcripts as one Parquet dataset: a file of one row per input in ``DIR/transcripts.parquet/``,
so that each is written atomically and a resumed job adds rows without rewriting any; readers take
the folder as one table (``pandas.read_parquet(DIR / "transcripts.parquet")``, ``ray.data.read_parquet``)."""

from __future__ import annotations

import json

from ..errors import SpecWhisperError

SEGMENT_FIELDS = (("start_s", "float64"), ("end_s", "float64"), ("text", "string"))


def parquet_row_bytes(item, result) -> bytes:
    """One input's row: name, path, text, language, duration, tokens, segments (start, end, text)
    and the decoding stats and timings as JSON (their keys differ between decoding paths)."""
    pa, pq = _pyarrow()
    data = result.to_dict()
    segments = [{"start_s": round(s.start_s, 3), "end_s": round(s.end_s, 3), "text": s.text} for s in result.segments]
    segment_type = pa.struct([(name, getattr(pa, kind)()) for name, kind in SEGMENT_FIELDS])
    table = pa.table({
        "name": pa.array([item.name], pa.string()),
        "path": pa.array([item.path], pa.string()),
        "text": pa.array([result.text], pa.string()),
        "language": pa.array([data.get("language")], pa.string()),
        "duration_s": pa.array([data.get("duration_s")], pa.float64()),
        "numerics": pa.array([data.get("numerics")], pa.string()),
        "tokens": pa.array([list(result.tokens)], pa.list_(pa.int32())),
        "segments": pa.array([segments], pa.list_(segment_type)),
        "stats": pa.array([json.dumps(data.get("stats"))], pa.string()),
        "timings": pa.array([json.dumps(data.get("timings"))], pa.string()),
    })
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecWhisperError("Parquet output needs pyarrow", where="--output-format parquet",
                               hint="pip install 'specwhisper[ray]' (or pyarrow), or use json") from None
    return pa, pq


def check_parquet_available() -> None:
    """Fail before any model loads where Parquet was asked for and cannot be written."""
    _pyarrow()
