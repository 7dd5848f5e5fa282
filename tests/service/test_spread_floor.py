"""The spread floor of an answer's interval (issue 35, third pass; ``choice.spread_floor``).

A system's own runs of the asked length set a floor (their spread is run-to-run noise); runs
of other lengths (a line answers them) and runs pooled over systems do not: their spread is
length or system, which the kind's backtest cell measures, and a floor stacked on it made
UNet3D's intervals over-cover (docs/lab/e2e-wallclock.md).
"""

from __future__ import annotations

import pandas as pd

from jobcast.service.engine.choice import spread_floor
from models.relation import Relation


def _runs(wall: list[float], iterations: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"wall_seconds": wall, "train_iterations": iterations,
                         "batch_size": [256] * len(wall)})


def test_own_runs_of_the_asked_length_set_a_floor_that_grows_with_their_spread() -> None:
    rel = Relation(kind="own-rate", target="job", system="own", lengths="same")
    steady = spread_floor(_runs([1000.0, 1010.0, 995.0], [5000.0] * 3), rel)
    noisy = spread_floor(_runs([1000.0, 1200.0, 900.0], [5000.0] * 3), rel)
    assert 0.0 < steady < noisy


def test_runs_of_other_lengths_or_other_systems_set_no_floor() -> None:
    rows = _runs([1000.0, 2600.0, 1900.0], [3000.0, 9000.0, 6000.0])
    line = Relation(kind="own-line", target="job", system="own", lengths="varied")
    fleet = Relation(kind="fleet-rate", target="job", system="any", lengths="same")
    assert spread_floor(rows, line) == 0.0 == spread_floor(rows, fleet)
    own = Relation(kind="own-rate", target="job", system="own", lengths="same")
    assert spread_floor(rows, own) > 0.0  # the same rows, read as one length's noise


def test_fewer_than_two_runs_set_no_floor() -> None:
    own = Relation(kind="own-rate", target="job", system="own", lengths="same")
    assert spread_floor(_runs([1000.0], [5000.0]), own) == 0.0
    assert spread_floor(None, own) == 0.0
