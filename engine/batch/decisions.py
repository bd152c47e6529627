"""What ``auto`` settles once for a whole batch job, before any input is decoded.

Under ``auto`` a window's numerics follow what the engine learned from the windows before it
(acceptance, across files), its encoder and the decoder of batch-invariant windows follow timings
(cached per machine, but measured afresh where the machine was too busy to measure). Each
numerics is exact on its own, but they round differently, so two processes that settled
differently can give a near-tie clip different tokens: a process pool's file then differs from the
same file in a sequential run. A batch job therefore settles these once, from an engine fresh from
loading (what a file's first window would get), and every worker decodes in that numerics, with
that encoder and decoder: the text of an input no longer depends on where, after which other inputs
or beside what it ran. Speculation's drafts and draft lengths still adapt; they change speed only.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class JobDecisions:
    """``numerics``: single-row or batch-invariant (``why``: the policy's reason, or "asked for");
    ``encoder``: the backend that ran (never auto); ``batch_decoder``: the decoder batch-invariant
    windows run on (ct2 or invariant) where they do, else the option as given."""

    numerics: str
    why: str
    encoder: str
    batch_decoder: str
    from_auto: bool = False  # numerics settled by ``auto`` (not asked for): drafting decided as under auto

    def apply(self, settings: argparse.Namespace) -> None:
        """Put these in ``settings`` in place of ``auto`` (in place: a transcriber made from
        ``settings`` reads its options at each call)."""
        settings.numerics, settings.encoder, settings.batch_decoder = self.numerics, self.encoder, self.batch_decoder
        settings.numerics_from_auto = self.from_auto

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> JobDecisions | None:
        """Decisions read back from the ledger (None: none, or a record of another version)."""
        try:
            return cls(**data) if data else None
        except TypeError:
            return None


def decide(engine, settings: argparse.Namespace) -> JobDecisions:
    """The decisions of ``engine``, opened with the job's ``settings`` and not yet used."""
    check = engine.selftest_result
    from_auto = settings.numerics == "auto"
    if from_auto:
        numerics, why = engine.auto_numerics(speculation=not settings.no_speculation, draft_len=settings.draft_len)
    else:
        numerics, why = settings.numerics, "asked for"
    batch_decoder = getattr(settings, "batch_decoder", "auto")
    if numerics == "batch-invariant" and check is not None and check.row_floor is not None:
        batch_decoder = check.decoder
    return JobDecisions(numerics, why, engine.lm.encoder_choice.name, batch_decoder, from_auto)


def settle(settings: argparse.Namespace, output_dir: str, original: argparse.Namespace):
    """Open the job's first engine in what it decodes in, put that in ``settings`` (a working copy
    of ``original``, the options as given) and return ``(engine, transcribe, decisions)``.

    What an earlier run into ``output_dir`` settled for the same text-deciding options comes first:
    a resume decodes in it whatever its workers and threads (it settled afresh and mixed two
    numerics in one folder). Where that cannot open here (an encoder this machine lacks), it says
    so and settles afresh. Otherwise this engine decides, and the decisions are recorded before
    any output is written."""
    from ..errors import SpecWhisperError, warn_caller
    from ..file_transcriber import open_transcriber
    from .ledger import record_decisions, recorded_decisions, settings_key

    key = settings_key(vars(original))
    recorded = JobDecisions.from_dict(recorded_decisions(output_dir, key))
    if recorded is not None:
        trial = argparse.Namespace(**vars(settings))
        recorded.apply(trial)
        try:
            engine, transcribe = open_transcriber(trial)
            recorded.apply(settings)
            return engine, transcribe, recorded
        except SpecWhisperError as exc:
            warn_caller(f"this output folder's earlier run decoded in {recorded.numerics} numerics with the "
                        f"{recorded.encoder} encoder, which cannot open here ({exc.what}): settled afresh, so "
                        "near-tie words may differ from its outputs")
    engine, transcribe = open_transcriber(settings)
    decisions = decide(engine, settings)
    decisions.apply(settings)
    record_decisions(output_dir, key, decisions.to_dict())
    return engine, transcribe, decisions


def settle_for_job(settings: argparse.Namespace, output_dir: str) -> JobDecisions:
    """``settle`` here, in the driver, only to decide (the engine is closed again): workers in
    other processes or on other machines then all decode alike, and a model that cannot load
    ends the job before any of them starts."""
    engine, _, decisions = settle(argparse.Namespace(**vars(settings)), output_dir, settings)
    engine.close()
    return decisions
