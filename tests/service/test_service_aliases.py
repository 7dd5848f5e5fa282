"""Renamed service names keep working for one release (issue 26): each old name is the new
object, and the old module warns."""

from __future__ import annotations

import importlib
import sys
import warnings


def test_old_class_names_are_the_new_classes():
    from jobcast.service import hybrid
    from jobcast.service.batch_shape import BatchShapeCalibrator, BatchShapeFit
    from jobcast.service.routes import CalibratedRoute, ScaleCalibratedRoute

    assert CalibratedRoute is ScaleCalibratedRoute
    assert BatchShapeCalibrator is BatchShapeFit and hybrid.BatchShapeCalibrator is BatchShapeFit


def test_old_registry_names_read_the_route_registry():
    from jobcast.service import candidates, forecaster, route_registry

    assert route_registry.kinds() == candidates.KINDS == (  # the order before the registry
        "own-rate", "own-model", "whole-job", "fleet-rate", "pooled-model", "hybrid",
        "scaled-count", "layerwise-calibrated", "layerwise")
    assert route_registry.fallback_errors() == candidates.FALLBACK_ERROR
    assert set(candidates.HISTORY_KINDS) == route_registry.history_kinds() == {
        "own-rate", "own-model", "whole-job", "fleet-rate", "pooled-model"}
    assert route_registry.history_routes() == forecaster.HISTORY_ROUTES
    assert [name for name, *_ in forecaster.ROUTES] == list(route_registry.route_names())


def test_the_old_calibration_module_warns_and_re_exports():
    from jobcast.service import scale_calibration

    sys.modules.pop("jobcast.service.calibration", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("jobcast.service.calibration")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert old.layerwise_observations is scale_calibration.layerwise_observations
    assert {"deployment", "hardware"} <= set(scale_calibration.COLUMNS)
