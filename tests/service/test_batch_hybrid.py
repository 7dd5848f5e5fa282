"""The hybrid route: layerwise shape versus batch size, scaled by a key's real Caffe history.

Stores are real SQLite files built from the bundled CaffeNet-128 log (batch 128, ingested as
the benchmark's ``caffenet128`` on one GTX Titan X, the GPU its sibling logs print) and, where
``../shared/data`` is present, from the shared batch-512 log too.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from paths import DATA

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from jobcast.service.engine.e2e_route import EndToEndRoute
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.hybrid import (
    BatchShapeFit,
    HybridRoute,
    history_from_points,
    key_points,
)
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.routes import LAYERWISE_MODEL, LayerwiseRoute
from layerwise import zoo
from layerwise.network import decompose
from layerwise.zoo import caffe
from models.dataset import progress_points
from models.e2e import fit_store

CAFFENET_128 = DATA / "caffe" / "ducha_caffenet128_lsuv_bs128_lr002.log"
RESNET20_2018 = DATA / "caffe" / "ethanhe42_resnet-20_logs_resnet-20__2018-10-19_01-43-18.log"
CAFFE_OVERRIDES = IngestOptions(network="caffenet128", deployment="1x GTX Titan X")


def _store(tmp_path, logs, overrides=CAFFE_OVERRIDES) -> Store:
    store = Store(f"sqlite:///{tmp_path}/store.db")
    report = ingest_paths(store, [str(p) for p in logs], overrides)
    assert not report.rejected, report.rejected
    fit_store(store)
    return store


@pytest.fixture(scope="module")
def one_batch(tmp_path_factory) -> Store:
    """The bundled batch-128 CaffeNet-128 log, ingested and fitted."""
    return _store(tmp_path_factory.mktemp("hybrid-one"), [CAFFENET_128])


def _deployment(store: Store) -> str:
    (run,) = store.runs()
    return run.deployment


def _train_history(store: Store):
    points = progress_points(store)
    return points[points["phase"] == "train"]


def _hybrid(forecaster: Forecaster, req: JobRequest):
    """The hybrid candidate the forecaster's routes propose for ``req`` (issue 22: whether it
    answers is the backtest selector's call; its properties are the route's)."""
    _, judged, _ = forecaster.candidates(req, exhaustive=True)
    found = [c.forecast for c, _ in judged if c.kind == "hybrid"]
    assert found, [c.kind for c, _ in judged]
    return found[0]


def test_unseen_batch_gets_a_hybrid_candidate_with_a_finite_interval(one_batch):
    history = history_from_points(_train_history(one_batch))
    assert history.batch_sizes == (128,)
    forecaster = Forecaster(store=one_batch)
    for batch in (32, 512):
        req = JobRequest(network="caffenet128", deployment=_deployment(one_batch),
                         batch_size=batch, iterations=2000, phase="train")
        answer = forecaster.forecast(req)
        assert answer.ok and answer.details["relation"]["batch"] == "other"
        out = _hybrid(forecaster, req)
        assert str(out.route) == "hybrid"
        assert all(math.isfinite(x) for x in (out.low, out.seconds, out.high))
        assert 0 < out.low < out.seconds < out.high
        models = out.details["models"]
        assert models["layerwise"] == LAYERWISE_MODEL
        assert models["end_to_end"].startswith("e2e/caffenet128/")
        assert out.model == f"{models['end_to_end']}+{LAYERWISE_MODEL}"
        assert (out.parts.end_to_end, out.parts.layerwise) == (models["end_to_end"],
                                                              LAYERWISE_MODEL)
        assert out.why == out.details["why_hybrid"]
        assert out.extrapolated
        hybrid = out.details["hybrid"]
        assert hybrid["history_source"] == "runs" and hybrid["shape_framework"] == "pytorch"
        assert [h["batch_size"] for h in hybrid["history"]] == [128]
        json.dumps(out.to_dict())  # the CLI's --json shape


def test_the_hybrid_follows_the_layerwise_shape_and_widens_away_from_history(one_batch):
    """One batch size of history: the forecast is the layerwise step times one ratio, so the
    ratio of two forecasts is the layerwise ratio; the interval grows with the distance."""
    forecaster = Forecaster(store=one_batch)
    deployment = _deployment(one_batch)
    near, far = (_hybrid(forecaster, JobRequest(network="caffenet128", deployment=deployment,
                                                batch_size=b, iterations=1000, phase="train"))
                 for b in (256, 1024))
    lw = near.details["hybrid"]["layerwise_step_seconds"] | \
        far.details["hybrid"]["layerwise_step_seconds"]
    step = {256: near.details["step_seconds"], 1024: far.details["step_seconds"]}
    assert step[1024] / step[256] == pytest.approx(lw[1024] / lw[256], rel=1e-9)
    assert far.high / far.low > near.high / near.low > 1


def test_a_batch_size_in_history_stays_end_to_end(one_batch):
    out = Forecaster(store=one_batch).forecast(JobRequest(
        network="caffenet128", deployment=_deployment(one_batch), batch_size=128,
        iterations=1000))
    assert out.ok and str(out.route) == "rate"
    assert "hybrid" not in out.details


def test_without_a_store_the_fitted_model_is_the_history(one_batch):
    models = Forecaster(store=one_batch).models
    out = _hybrid(Forecaster(models=models), JobRequest(
        network="caffenet128", deployment=_deployment(one_batch), batch_size=512,
        iterations=1000, phase="train"))
    assert str(out.route) == "hybrid"
    assert out.details["hybrid"]["history_source"] == "model"
    assert out.low < out.seconds < out.high


def test_evaluation_plans_and_unpriced_networks_are_not_hybrid(one_batch, tmp_path):
    plan = Forecaster(store=one_batch).forecast(JobRequest(
        network="caffenet128", deployment=_deployment(one_batch), batch_size=512, epochs=1,
        dataset_size=100_000, eval_every=1, eval_size=5000))
    assert plan.ok and str(plan.route) != "hybrid"  # (this log's single test pass fits no model)
    # ResNet-20 (CIFAR) has no shipped spec: the hybrid declines, history still answers
    store = _store(tmp_path, [RESNET20_2018], IngestOptions(network="resnet20"))
    assert zoo.lookup("resnet20") is None
    runs = store.runs()
    batch = runs[0].batch_size
    out = Forecaster(store=store).forecast(JobRequest(
        network="resnet20", deployment=runs[0].deployment, batch_size=batch * 2,
        iterations=1000))
    assert out.ok and str(out.route) == "end-to-end"


def test_calibrator_passes_through_history_and_rejects_bad_input(one_batch):
    """Ratio mode reproduces every observed step exactly; split and ratio agree on one batch."""
    store = one_batch
    route = HybridRoute(LayerwiseRoute(), EndToEndRoute(Forecaster(store=store).models), store)
    model = route.end_to_end.models[0]
    history = route.history(model)
    req = JobRequest(network="caffenet128", deployment=_deployment(store), batch_size=128,
                     iterations=1)
    shapes = route.shape(req, [128, 512], "pytorch")
    obs = shapes[shapes["batch_size"] == 128].assign(
        step_seconds=history.observations[0].step_seconds, runs=1, log_sd=math.nan)
    for mode in ("ratio", "split"):
        cal = BatchShapeFit(mode=mode).fit(obs, obs["step_seconds"])
        assert cal.mode_ == "ratio"  # one batch size cannot be split
        got = cal.predict_interval(shapes)
        assert got["seconds"].iloc[0] == pytest.approx(obs["step_seconds"].iloc[0], rel=1e-12)
        assert np.all(got["low"] < got["seconds"]) and np.all(got["seconds"] < got["high"])
        assert got["distance"].iloc[0] == 0 and got["distance"].iloc[1] > 0
    bad = obs.assign(variable_s=-1.0)
    with pytest.raises(ValueError, match="positive, finite"):
        BatchShapeFit().fit(bad, bad["step_seconds"])
    with pytest.raises(ValueError, match="mode"):
        BatchShapeFit(mode="cubic").fit(obs, obs["step_seconds"])
    assert key_points(progress_points(store), model)["source"].nunique() == 1


def test_stack_words_pick_the_shape_framework():
    from fleet.framework import stack_framework as shape_framework

    assert shape_framework("Caffe", "tensorflow") == "pytorch"
    assert shape_framework("NVIDIA TensorFlow 20.06", "pytorch") == "tensorflow"
    assert shape_framework("MXNet NGC 18.11", "tensorflow") == "tensorflow"
    assert shape_framework(None, "pytorch") == "pytorch"


def test_caffenet128_spec_is_the_generators_and_caffes():
    """The shipped spec equals what layerwise.zoo.caffe writes; Caffe's parameter count;
    grouped convolutions as one Conv2D per group; no TensorFlow needed to decompose it."""
    shipped = json.loads((zoo.DATA_DIR / "caffenet128.json").read_text())
    assert shipped == json.loads(json.dumps(caffe.spec_of("caffenet128")))
    spec = zoo.load("caffenet128")
    assert spec.totals["params"] == caffe.CAFFENET128_PARAMS
    convs = [layer for layer in spec.layers if layer.cls == "Conv2D"]
    assert [c.name for c in convs] == ["conv1", "conv2_g0", "conv2_g1", "conv3", "conv4_g0",
                                       "conv4_g1", "conv5_g0", "conv5_g1"]
    net = decompose("caffenet128", batch_size=4, optimizer="sgd")
    assert net.input_shape == (128, 128, 3) and net.count("unknown") == 0
    assert net.macs == pytest.approx(4 * spec.totals["macs"])


@pytest.fixture(scope="module")
def two_batches(tmp_path_factory, shared_data) -> Store:
    logs = sorted((shared_data / "logs" / "caffe").glob("ducha_caffenet128_*.log"))
    if len(logs) < 2:
        pytest.skip("the shared CaffeNet-128 logs are not there")
    return _store(tmp_path_factory.mktemp("hybrid-two"), logs)


def test_two_batch_sizes_give_hybrid_candidates_outside_and_between_them(two_batches):
    deployment = two_batches.runs()[0].deployment
    history = history_from_points(_train_history(two_batches))
    assert history.batch_sizes == (128, 512)
    forecaster = Forecaster(store=two_batches)

    def ask(batch: int):
        return _hybrid(forecaster, JobRequest(network="caffenet128", deployment=deployment,
                                              batch_size=batch, iterations=5000, phase="train"))

    for batch in (64, 256, 1024):
        out = ask(batch)
        assert str(out.route) == "hybrid", batch
        assert 0 < out.low < out.seconds < out.high < math.inf
        assert len(out.details["hybrid"]["history"]) == 2
    for batch in (128, 512):  # a batch size in history: no hybrid, history answers
        _, judged, _ = forecaster.candidates(JobRequest(
            network="caffenet128", deployment=deployment, batch_size=batch, iterations=5000),
            exhaustive=True)
        assert "hybrid" not in {c.kind for c, _ in judged}
        assert str(forecaster.forecast(JobRequest(
            network="caffenet128", deployment=deployment, batch_size=batch,
            iterations=5000)).route) == "rate"
    # between the two, the ratio to the layerwise step is interpolated between theirs
    mid = ask(256)
    ratios = mid.details["hybrid"]["ratios"]
    applied = mid.details["step_seconds"] / mid.details["hybrid"]["layerwise_step_seconds"][256]
    assert sorted(ratios) == [128, 512]
    assert min(ratios.values()) <= applied <= max(ratios.values())


def test_a_batch_between_three_history_batch_sizes_gets_a_hybrid_candidate(tmp_path):
    """However many batch sizes history has, one it lacks gets a hybrid candidate, which
    interpolates the ratios of the nearest two (the end-to-end line fits them all at once)."""
    text = CAFFENET_128.read_text()
    logs = [CAFFENET_128]
    for batch in (32, 512):  # the same log stated at other batch sizes: three in history
        other = tmp_path / f"caffenet128_bs{batch}.log"
        other.write_text(text.replace("batch_size: 128", f"batch_size: {batch}"))
        logs.append(other)
    store = _store(tmp_path, logs)
    assert history_from_points(_train_history(store)).batch_sizes == (32, 128, 512)
    forecaster = Forecaster(store=store)
    out = _hybrid(forecaster, JobRequest(network="caffenet128",
                                         deployment=store.runs()[0].deployment,
                                         batch_size=64, iterations=5000, phase="train"))
    assert str(out.route) == "hybrid"
    assert sorted(out.details["hybrid"]["ratios"]) == [32, 128, 512]
    assert out.to_dict()["chosen"]  # which end-to-end model it scales
    assert 0 < out.low < out.seconds < out.high < math.inf
