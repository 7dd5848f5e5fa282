"""A recurring job's level is never set by one slow run (issue 35, cause 3): the next run is
forecast near the typical run, while two slow runs in a row are a new level."""

from __future__ import annotations

import statistics

from ingest.whole_job import WholeJobRun
from models.whole_job import whole_job_candidate

DEP = "nvidia-a100-sxm4-40gb-x8"


def _runs(seconds: list[float]) -> list[WholeJobRun]:
    t0 = 1_760_000_000.0
    return [WholeJobRun(run_id=i, source="sacct.json", key="nightly", deployment=DEP,
                        state="completed", seconds=s, start=t0 + i * 86400.0,
                        end=t0 + i * 86400.0 + s, gpus=8, accelerator=None, name="nightly",
                        job_id=str(i)) for i, s in enumerate(seconds)]


def test_a_slow_last_run_does_not_set_the_level() -> None:
    typical = [30000.0, 31000.0, 29500.0, 30500.0, 30200.0]
    found = whole_job_candidate(_runs([*typical, 48000.0]), "nightly", DEP)
    assert abs(found.seconds - statistics.median(typical)) < 0.05 * 30000.0
    assert found.low < statistics.median(typical) < found.high


def test_two_slow_runs_in_a_row_are_a_new_level() -> None:
    found = whole_job_candidate(_runs([30000.0, 31000.0, 29500.0, 30500.0, 30200.0,
                                       30400.0, 48000.0, 48500.0]), "nightly", DEP)
    assert found.seconds > 40000.0
