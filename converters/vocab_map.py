"""Token remap tables between two Whisper vocabularies, for a drafter whose model speaks another one.

``draft_to_main[d]`` is the main-model id spelling exactly the same bytes as draft token ``d``
(and ``main_to_draft`` the reverse), or -1 when no single token does; the drafter falls back to
text for those. Control tokens map by meaning, not by id: end-of-text, start-of-transcript,
no-timestamps, task, language and timestamp tokens keep their roles (``<|nocaptions|>`` and
``<|nospeech|>`` are one token under two names, as are Hebrew's ``<|iw|>`` and ``<|he|>``). Text tokens never map to control tokens.

The tables are saved as a small ``.npz`` (no pickle) together with both tokenizers'
fingerprints and the coverage statistics; ``load_vocab_map`` refuses a file made for other
tokenizers, so a stale map can never remap ids silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specwhisper.errors import TokenMapError
from specwhisper.tokenizer import WhisperTokenizer

FORMAT = "specwhisper-vocab-map/1"
_SAME_MEANING = {"<|nocaptions|>": "<|nospeech|>", "<|iw|>": "<|he|>"}  # one token, two spellings


@dataclass(frozen=True)
class VocabMap:
    """Both directions of the remap plus the fingerprints they were built for."""

    draft_to_main: np.ndarray  # int32 [draft vocab size], -1 = no single-token equivalent
    main_to_draft: np.ndarray  # int32 [main vocab size]
    main_fingerprint: str
    draft_fingerprint: str
    stats: dict = field(default_factory=dict)

    def map_draft(self, ids: list[int]) -> list[int]:
        """Draft ids -> main ids, stopping before the first token without an equivalent."""
        out = []
        table = self.draft_to_main
        for i in ids:
            m = int(table[i]) if 0 <= i < len(table) else -1
            if m < 0:
                break
            out.append(m)
        return out

    def map_main(self, ids: list[int]) -> list[int]:
        """Main ids -> draft ids, stopping before the first token without an equivalent."""
        out = []
        table = self.main_to_draft
        for i in ids:
            d = int(table[i]) if 0 <= i < len(table) else -1
            if d < 0:
                break
            out.append(d)
        return out

    def swapped(self) -> VocabMap:
        """The same map with the roles of the two models exchanged."""
        stats = dict(self.stats)
        stats["draft_text_coverage"], stats["main_text_coverage"] = (
            self.stats.get("main_text_coverage"), self.stats.get("draft_text_coverage"))
        return VocabMap(self.main_to_draft, self.draft_to_main, self.draft_fingerprint, self.main_fingerprint, stats)

    def save(self, path: str | Path) -> Path:
        """Write the .npz atomically (temporary file + rename)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as fh:
            np.savez_compressed(fh, draft_to_main=self.draft_to_main.astype(np.int32),
                     main_to_draft=self.main_to_draft.astype(np.int32),
                     format=np.array(FORMAT), main_fingerprint=np.array(self.main_fingerprint),
                     draft_fingerprint=np.array(self.draft_fingerprint),
                     stats=np.array(json.dumps(self.stats, sort_keys=True)))
        os.replace(tmp, path)
        return path


def _id_to_token(model_dir: Path, tok: WhisperTokenizer) -> list[str | None]:
    """Name of every output id: the CT2 vocabulary file covers timestamps that tokenizer.json may lack."""
    vj, vt = model_dir / "vocabulary.json", model_dir / "vocabulary.txt"
    names: list[str | None] | None = None
    try:
        if vj.is_file():
            names = json.loads(vj.read_text(encoding="utf-8"))
        elif vt.is_file():
            names = vt.read_text(encoding="utf-8").split("\n")[: tok.vocab_size]
    except (OSError, ValueError):
        names = None
    if not names:
        names = [tok.token_text(i) for i in range(tok.vocab_size)]
    return [_SAME_MEANING.get(n, n) if n is not None else None for n in names]


def _table(src: list[str | None], dst: list[str | None], src_eot: int, dst_eot: int) -> np.ndarray:
    """src id -> dst id for equal names, with text (< eot) and control (>= eot) kept apart."""
    index = {name: i for i, name in enumerate(dst) if name is not None}
    out = np.full(len(src), -1, dtype=np.int32)
    for i, name in enumerate(src):
        j = index.get(name, -1) if name is not None else -1
        if j >= 0 and (i < src_eot) == (j < dst_eot):
            out[i] = j
    return out


def build_vocab_map(main_dir: str | Path, draft_dir: str | Path, sample_text: str | None = None) -> VocabMap:
    """Remap tables between the main model in ``main_dir`` and the draft model in ``draft_dir``.

    ``sample_text`` (optional) adds a usage-weighted statistic: the share of the draft
    tokenization of that text that maps to single main tokens.
    """
    main_dir, draft_dir = Path(main_dir), Path(draft_dir)
    main_tok = WhisperTokenizer.from_model_dir(main_dir)
    draft_tok = WhisperTokenizer.from_model_dir(draft_dir)
    main_names = _id_to_token(main_dir, main_tok)
    draft_names = _id_to_token(draft_dir, draft_tok)
    d_eot, m_eot = draft_tok.special.eot, main_tok.special.eot
    d2m = _table(draft_names, main_names, d_eot, m_eot)
    m2d = _table(main_names, draft_names, m_eot, d_eot)
    stats = _coverage(d2m, m2d, d_eot, m_eot, draft_tok, main_tok)
    if sample_text:
        ids = draft_tok.encode(sample_text)
        stats["sample_tokens"] = len(ids)
        stats["sample_coverage"] = round(float(np.mean(d2m[ids] >= 0)), 4) if ids else None
    return VocabMap(d2m, m2d, main_tok.fingerprint(), draft_tok.fingerprint(), stats)


def _coverage(d2m: np.ndarray, m2d: np.ndarray, d_eot: int, m_eot: int,
              draft_tok: WhisperTokenizer, main_tok: WhisperTokenizer) -> dict:
    named = {
        "eot": (draft_tok.special.eot, main_tok.special.eot),
        "sot": (draft_tok.special.sot, main_tok.special.sot),
        "no_timestamps": (draft_tok.special.no_timestamps, main_tok.special.no_timestamps),
        "transcribe": (draft_tok.special.transcribe, main_tok.special.transcribe),
        "translate": (draft_tok.special.translate, main_tok.special.translate),
        "sot_prev": (draft_tok.special.sot_prev, main_tok.special.sot_prev),
        "timestamp_begin": (draft_tok.special.timestamp_begin, main_tok.special.timestamp_begin),
    }
    specials_ok = {k: bool(d < len(d2m) and d2m[d] == m) for k, (d, m) in named.items()}
    return {
        "draft_vocab": int(len(d2m)),
        "main_vocab": int(len(m2d)),
        "draft_text_total": int(d_eot),
        "draft_text_mapped": int(np.sum(d2m[:d_eot] >= 0)),
        "draft_text_coverage": round(float(np.mean(d2m[:d_eot] >= 0)), 4),
        "main_text_total": int(m_eot),
        "main_text_mapped": int(np.sum(m2d[:m_eot] >= 0)),
        "main_text_coverage": round(float(np.mean(m2d[:m_eot] >= 0)), 4),
        "draft_control_mapped": int(np.sum(d2m[d_eot:] >= 0)),
        "draft_control_total": int(len(d2m) - d_eot),
        "specials_mapped": specials_ok,
    }


def format_stats(stats: dict) -> str:
    """One human-readable paragraph of coverage numbers (printed by the CLI)."""
    lines = [
        f"draft -> main: {stats['draft_text_mapped']}/{stats['draft_text_total']} text tokens ({100 * stats['draft_text_coverage']:.1f}%), "
        f"{stats['draft_control_mapped']}/{stats['draft_control_total']} control tokens",
        f"main -> draft: {stats['main_text_mapped']}/{stats['main_text_total']} text tokens "
        f"({100 * stats['main_text_coverage']:.1f}%)",
    ]
    missing = [k for k, ok in stats.get("specials_mapped", {}).items() if not ok]
    lines.append("specials: all mapped" if not missing else f"specials NOT mapped: {', '.join(missing)}")
    if stats.get("sample_coverage") is not None:
        lines.append(f"sample text: {100 * stats['sample_coverage']:.1f}% of {stats['sample_tokens']} draft tokens map")
    return "\n".join(lines)


def vocab_map_path(main_dir: str | Path, draft_fingerprint: str) -> Path:
    """Where the map for a given draft vocabulary lives inside the main model's directory."""
    return Path(main_dir) / f"vocab_map.{draft_fingerprint}.npz"


def load_vocab_map(path: str | Path, main_tok: WhisperTokenizer, draft_tok: WhisperTokenizer) -> VocabMap:
    """Read a map and check it belongs to these two tokenizers (swapped roles are accepted and swapped)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            fmt = str(data["format"])
            vm = VocabMap(np.asarray(data["draft_to_main"], dtype=np.int32),
                          np.asarray(data["main_to_draft"], dtype=np.int32),
                          str(data["main_fingerprint"]), str(data["draft_fingerprint"]),
                          json.loads(str(data["stats"])))
    except FileNotFoundError:
        raise TokenMapError("vocabulary map not found", where=str(path),
                            hint="build it with 'specwhisper convert MAIN -o OUT --draft-map DRAFT'") from None
    except (OSError, ValueError, KeyError) as exc:
        raise TokenMapError(f"vocabulary map cannot be read: {exc}", where=str(path),
                            hint="rebuild it with 'specwhisper convert ... --draft-map DRAFT'") from None
    if fmt != FORMAT:
        raise TokenMapError(f"vocabulary map has format {fmt!r}, expected {FORMAT!r}", where=str(path),
                            hint="rebuild it with this version of specwhisper")
    main_fp, draft_fp = main_tok.fingerprint(), draft_tok.fingerprint()
    if (vm.main_fingerprint, vm.draft_fingerprint) == (draft_fp, main_fp) and main_fp != draft_fp:
        vm = vm.swapped()
    if (vm.main_fingerprint, vm.draft_fingerprint) != (main_fp, draft_fp):
        raise TokenMapError(
            f"vocabulary map was built for other tokenizers (map: main {vm.main_fingerprint}, draft "
            f"{vm.draft_fingerprint}; models: main {main_fp}, draft {draft_fp})",
            where=str(path), hint="rebuild it for these two models with 'specwhisper convert ... --draft-map'",
        )
    if len(vm.draft_to_main) < draft_tok.vocab_size or len(vm.main_to_draft) < main_tok.vocab_size:
        raise TokenMapError("vocabulary map is shorter than the models' vocabularies", where=str(path),
                            hint="rebuild it with 'specwhisper convert ... --draft-map'")
    if vm.draft_to_main.max(initial=-1) >= len(vm.main_to_draft) or vm.main_to_draft.max(initial=-1) >= len(vm.draft_to_main):
        raise TokenMapError("vocabulary map holds ids outside the vocabularies", where=str(path),
                            hint="the file is corrupt; rebuild it")
    return vm


def write_vocab_map(main_dir: str | Path, draft_dir: str | Path, sample_text: str | None = None) -> tuple[Path, VocabMap]:
    """Build the map for (main, draft) and store it inside ``main_dir``; returns (path, map)."""
    vm = build_vocab_map(main_dir, draft_dir, sample_text)
    return vm.save(vocab_map_path(main_dir, vm.draft_fingerprint)), vm
