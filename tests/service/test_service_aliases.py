"""Renamed service names keep working for one release (issue 26): each old name is the new
object (or reads the registry live) and says, with a DeprecationWarning, what replaced it."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest


def test_old_class_names_are_the_new_classes():
    from jobcast.service.engine import hybrid
    from jobcast.service.engine.batch_shape import BatchShapeFit
    from jobcast.service.engine.routes import ScaleCalibratedRoute

    with pytest.deprecated_call(match="use jobcast.service.engine.routes.ScaleCalibratedRoute"):
        from jobcast.service.engine.routes import CalibratedRoute
    with pytest.deprecated_call(match="use jobcast.service.engine.batch_shape.BatchShapeFit"):
        from jobcast.service.engine.batch_shape import BatchShapeCalibrator
    assert CalibratedRoute is ScaleCalibratedRoute and BatchShapeCalibrator is BatchShapeFit
    with pytest.deprecated_call():
        assert hybrid.BatchShapeCalibrator is BatchShapeFit


def test_old_registry_names_read_the_route_registry():
    from jobcast.service.engine import candidates, forecaster, route_registry

    with warnings.catch_warnings():  # each read warns: shown below
        warnings.simplefilter("ignore", DeprecationWarning)
        assert route_registry.kinds() == candidates.KINDS == (  # by fallback rank
            "own-rate", "own-median", "own-recent", "own-line", "own-trend", "own-model",
            "whole-job", "fleet-rate", "pooled-model", "hybrid", "scaled-count",
            "layerwise-calibrated", "layerwise")
        assert route_registry.fallback_errors() == candidates.FALLBACK_ERROR
        assert set(candidates.HISTORY_KINDS) == route_registry.history_kinds() == {
            "own-rate", "own-median", "own-recent", "own-line", "own-trend", "own-model",
            "whole-job", "fleet-rate", "pooled-model"}
        assert route_registry.history_routes() == forecaster.HISTORY_ROUTES
        assert [name for name, *_ in forecaster.ROUTES] == list(route_registry.route_names())
    for module, old in ((candidates, "KINDS"), (candidates, "FALLBACK_ERROR"),
                        (candidates, "HISTORY_KINDS"), (forecaster, "ROUTES"),
                        (forecaster, "HISTORY_ROUTES")):
        with pytest.deprecated_call(match=f"{old} is deprecated.*route_registry"):
            getattr(module, old)


def test_the_old_calibration_module_warns_and_re_exports():
    from jobcast.service.engine import scale_calibration

    sys.modules.pop("jobcast.service.calibration", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("jobcast.service.calibration")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert old.layerwise_observations is scale_calibration.layerwise_observations
    assert {"deployment", "hardware"} <= set(scale_calibration.COLUMNS)
