"""The layer-kind registry: a new kind is one class plus one ``register`` call.

The toy kind below (ZeroPadding2D as a benchmarkable kind) is defined only here; it flows
through spec lookup, columns, sampling, features, JSON and Keras decomposition, benchmark
rows and forecasts without any other module naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest

from layerwise.bench import bench_row, campaign_configs, parse_layers
from layerwise.features import feature_frame
from layerwise.kinds import KINDS, register, unregister
from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.plane import PlaneKind
from layerwise.kinds.space import FeatureSpace, draw_int
from layerwise.layers import all_columns, get_layer
from layerwise.network import decompose


class ZeroPad(PlaneKind):
    """Symmetric zero padding of ``pad`` pixels on every side."""

    name = "zeropad"
    columns = ("batchsize", "matsize", "channels_in", "pad")
    description = "ZeroPadding2D (symmetric)"
    keras_classes = ("ZeroPadding2D",)
    spec_types = ("zeropad",)

    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return {**super().draw(rng, space), "pad": draw_int(rng, (0, 3))}

    def output_shape(self, row: Row) -> tuple[int, ...]:
        b, m, _, c = self.input_shape(row)
        side = m + 2 * int(row["pad"])
        return (b, side, side, c)

    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return elements(row, shape)

    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.ZeroPadding2D(int(row["pad"]))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        pad = ctx.layer.config["padding"]
        x = ctx.layer.x
        if len({p for pair in pad for p in pair}) != 1 or x[0] != x[1]:
            return None
        return [ctx.known(self.name, {"matsize": x[0], "channels_in": x[-1],
                                      "pad": pad[0][0]})]

    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        p = int(entry.get("pad", 1))
        return NetLayer(name, "ZeroPadding2D", [x], (x[0] + 2 * p, x[1] + 2 * p, x[2]),
                        {"padding": ((p, p), (p, p))})

    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.ZeroPadding2D(layer.config["padding"], name=layer.name)


NET = {"name": "padded", "input_shape": [8, 8, 3], "layers": [
    {"type": "zeropad", "pad": 2}, {"type": "conv", "filters": 4, "kernel": 3},
]}


@pytest.fixture
def toy():
    # the shipped ``pad`` kind owns ZeroPadding2D: step it aside, restore the registry after
    saved = dict(KINDS)
    unregister("pad")
    kind = register(ZeroPad())
    try:
        yield kind
    finally:
        KINDS.clear()
        KINDS.update(saved)


def test_toy_kind_flows_through_specs_columns_and_sampling(toy):
    assert get_layer("zeropad") is toy and KINDS["zeropad"] is toy
    assert "pad" in all_columns() and all_columns()[-2:] == ["optimizer", "precision"]
    assert parse_layers("all")[-1] == "zeropad"
    rows = list(campaign_configs(["zeropad"], 20, seed=1, space="cpu"))
    assert all(r["layer"] == "zeropad" and toy.check(r) == [] for r in rows)
    row = dict(layer="zeropad", batchsize=2, matsize=4, channels_in=3, pad=1)
    assert toy.output_shape(row) == (2, 6, 6, 3) and toy.flops(row) == 2 * 36 * 3
    frame = pd.DataFrame(rows).assign(gpu="V100")
    feats = feature_frame(frame, "zeropad")
    assert "pad" in feats.columns and np.isfinite(feats.to_numpy()).all()
    assert toy.minimal_row("sgd") == {"layer": "zeropad", "optimizer": "sgd", "precision": 32,
                                      "batchsize": 1, "matsize": 1, "channels_in": 1, "pad": 1}


def test_toy_kind_flows_through_json_decomposition(toy):
    rows = decompose(NET, batch_size=2).rows
    assert [r["layer"] for r in rows] == ["zeropad", "conv"]
    assert rows[0]["output_shape"] == "12x12x3" and rows[1]["matsize"] == 12
    assert rows[0]["flops"] == toy.flops(rows[0]) > 0


def test_registry_rules_and_cleanup():
    with pytest.raises(ValueError, match="already registered"):
        register(type(KINDS["conv"])())
    with pytest.raises(ValueError, match="already belong to conv"):
        register(type("Conv3", (ZeroPad,), {"name": "conv3", "keras_classes": ("Conv2D",)})())
    assert "zeropad" not in KINDS
    with pytest.raises(ValueError, match="type 'zeropad' unknown"):
        decompose(NET)


def test_toy_kind_flows_through_keras_decomposition_and_benchmark(toy):
    pytest.importorskip("tensorflow")
    from layerwise.bench import TimingPlan
    from layerwise.network import spec_to_keras

    model = spec_to_keras(NET)
    rows = decompose(model, batch_size=2).rows
    assert [r["layer"] for r in rows] == ["zeropad", "conv"]
    assert rows[0]["pad"] == 2
    record = bench_row(dict(layer="zeropad", batchsize=2, matsize=4, channels_in=3, pad=1,
                            optimizer="sgd", precision=32),
                       plan=TimingPlan(warmup=1, reps=2, runs=1))
    assert record["status"] == "ok", record["error"]
    assert record["time_ms_median"] > 0 and record["flops"] == 2 * 36 * 3
