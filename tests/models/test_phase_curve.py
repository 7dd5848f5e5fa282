"""A stored phase model forecasts as it was fitted (``models.phase_curve``): the records of
the bundled MLPerf logs' fit, read back as light :class:`PhaseCurve` objects (no
scikit-learn), give exactly the fitted models' seconds, intervals and extrapolation flags."""

from __future__ import annotations

import numpy as np
import pandas as pd
from paths import DATA
from sklearn.base import BaseEstimator

from ingest.pipeline import ingest_paths
from ingest.store import Store
from models.e2e import fit_store, load_models
from models.phase_curve import PhaseCurve
from models.phase_model import PhaseTimeModel


def test_stored_models_forecast_exactly_as_fitted(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    ingest_paths(store, [str(DATA / "mlperf")])
    fitted = {m.model_id: m for m in fit_store(store)}
    loaded = load_models(store)
    assert fitted and sorted(fitted) == sorted(m.model_id for m in loaded)
    for stored in loaded:
        est, own = stored.estimator, fitted[stored.model_id].estimator
        assert isinstance(own, PhaseTimeModel) and isinstance(est, PhaseCurve)
        assert not isinstance(est, BaseEstimator)  # read back without scikit-learn
        low, high = own.batch_range_
        jobs = pd.DataFrame({"iterations": [1.0, 100.0, 5e3, 1e6] * 3,
                             "batch_size": np.repeat([low / 4, (low + high) / 2, high * 8], 4)})
        pd.testing.assert_frame_equal(est.predict_interval(jobs), own.predict_interval(jobs),
                                      check_exact=True)
        assert est.to_dict() == own.to_dict()
        assert [est.extrapolates(*j) for j in jobs.to_numpy()] == \
            [own.extrapolates(*j) for j in jobs.to_numpy()]
        assert est.thin_ == own.thin_ and est.evidence() == own.evidence()
