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


def recorded_or_none(output_dir: str, settings: argparse.Namespace) -> JobDecisions | None:
    """What an earlier run of this job (same folder, same text-deciding options) settled: a resume
    decodes in it whatever its workers and threads, so a folder holds one numerics."""
    from .ledger import recorded_decisions, settings_key

    return JobDecisions.from_dict(recorded_decisions(output_dir, settings_key(vars(settings))))


def keep(decisions: JobDecisions, output_dir: str, settings: argparse.Namespace) -> None:
    from .ledger import record_decisions, settings_key

    record_decisions(output_dir, settings_key(vars(settings)), decisions.to_dict())


def decide_for_job(settings: argparse.Namespace) -> JobDecisions:
    """Open an engine with the job's settings here, in the driver, only to decide (then close it):
    workers in other processes or on other machines then all decode alike."""
    from ..file_transcriber import open_transcriber

    engine, _ = open_transcriber(settings)
    try:
        return decide(engine, settings)
    finally:
        engine.close()
