"""Every torchvision classification network, traced as a user's module (issue 36, must-show 2).

For each name of ``torchvision.models.list_models(module=torchvision.models)``: the reference
``torchvision.models:NAME(num_classes=1000)`` (literal arguments: built on the meta device and
traced, as a user's ``pkg.module:callable``, not read from the shipped spec) is decomposed at
batch 12; its parameter count is compared with PyTorch's (``sum(p.numel())`` of the same
builder on the meta device). Where ``torchvision_bench`` measured the network (four GPUs, fp32
and pure fp16, batch 12, forward + loss + backward, no optimizer step), the product's answer
(:func:`layerwise.forecast.forecast_network`, shipped predictor, framework ``pytorch``,
optimizer ``sgd``) is compared with the measured step: the ratio predicted / measured, and
whether it lies within 2x either way.

Needs torchvision (not in the project's venv; see ``../shared/NOTES.md``, 2026-12-03)::

    PYTHONPATH=. /path/to/venv-with-torchvision/bin/python benchmarks/layerwise_torchvision_all.py

Writes ``docs/lab/layerwise-torchvision-all.md``. Each network is traced once: the benchmark
keeps the traced network for its forecasts (a cache around :func:`layerwise.quick.network_rows`).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd
from lib import REPO as ROOT

DOC = ROOT / "docs" / "lab" / "layerwise-torchvision-all.md"
BATCH = 12
SIDES = {"inception_v3": 299}  # torchvision's own input side where 224 does not build


def reference(name: str) -> str:
    """A user's reference to the torchvision builder (traced, not the shipped spec)."""
    return f"torchvision.models:{name}(num_classes=1000)"


def pytorch_params(name: str) -> int:
    """PyTorch's own parameter count of the builder, on the meta device (on the CPU for a
    builder the meta device cannot build)."""
    import torch
    import torchvision

    try:
        with torch.device("meta"):
            model = torchvision.models.get_model(name, num_classes=1000)
    except NotImplementedError:  # a builder that copies values at init (e.g. RegNet's)
        model = torchvision.models.get_model(name, num_classes=1000)
    return int(sum(p.numel() for p in model.parameters()))


def cached_rows():
    """Patch :func:`layerwise.quick.network_rows` to keep each traced network (by reference,
    batch, optimizer, framework); returns the cache."""
    from layerwise.pricing import batch as quick

    original, cache = quick.network_rows, {}

    def rows(network, batch_size, optimizer, image_size, framework):
        key = (str(network), int(batch_size), optimizer, image_size, framework)
        if key not in cache:
            cache[key] = original(network, batch_size, optimizer, image_size, framework)
        return cache[key]

    quick.network_rows = rows
    return cache


def main() -> None:
    import torchvision

    from layerwise.corpora.tables import shared_data_dir
    from layerwise.corpora.torchvision_bench import tvbench_targets
    from layerwise.forecast import forecast_network
    from layerwise.network import decompose

    warnings.simplefilter("ignore")
    started = time.perf_counter()
    cached_rows()
    measured = tvbench_targets(shared_data_dir() / "torchvision_bench")
    names = torchvision.models.list_models(module=torchvision.models)
    records, steps = [], []
    for name in names:
        rec = {"network": name, "pytorch_params": pytorch_params(name)}
        t0 = time.perf_counter()
        try:
            net = decompose(reference(name), batch_size=BATCH, optimizer="sgd",
                            framework="pytorch", image_size=SIDES.get(name))
            rec.update(traced_params=int(net.params), rows=len(net.rows),
                       unknown=sum(r["layer"] == "unknown" for r in net.rows), error="")
        except Exception as exc:  # noqa: BLE001  (a benchmark reports, it does not stop)
            rec.update(traced_params=-1, rows=0, unknown=0, error=str(exc).splitlines()[0][:120])
        rec["trace_s"] = time.perf_counter() - t0
        records.append(rec)
        for t in measured[measured["network"] == name].itertuples():
            if rec["error"]:
                break
            res = forecast_network(reference(name), device=t.gpu, batch_size=BATCH,
                                   optimizer="sgd", precision=t.precision, framework="pytorch")
            steps.append({"network": name, "gpu": t.gpu, "precision": t.precision,
                          "step_ms": t.step_ms, "pred_ms": 1000.0 * res["batch_seconds"],
                          "low_ms": 1000.0 * res["low"], "high_ms": 1000.0 * res["high"]})
        print(f"{name}: {rec}", flush=True)
    write(pd.DataFrame(records), pd.DataFrame(steps), time.perf_counter() - started)


def write(nets: pd.DataFrame, steps: pd.DataFrame, seconds: float) -> None:
    """Print and write the document."""
    nets["params_equal"] = nets["traced_params"] == nets["pytorch_params"]
    steps["ratio"] = steps["pred_ms"] / steps["step_ms"]
    steps["within_2x"] = (steps["ratio"] <= 2.0) & (steps["ratio"] >= 0.5)
    steps["covered"] = ((steps["step_ms"] >= steps["low_ms"])
                        & (steps["step_ms"] <= steps["high_ms"]))
    ape = (steps["ratio"] - 1.0).abs() * 100.0
    summary = pd.DataFrame([{
        "networks": len(nets), "traced": int((nets["error"] == "").sum()),
        "params_equal": int(nets["params_equal"].sum()),
        "measured_rows": len(steps), "within_2x": int(steps["within_2x"].sum()),
        "mape": float(ape.mean()), "median_ape": float(ape.median()),
        "coverage": float(steps["covered"].mean()),
        "worst_ratio_low": float(steps["ratio"].min()),
        "worst_ratio_high": float(steps["ratio"].max())}])
    print(summary.to_string(index=False))
    worst = steps.assign(ape=ape).sort_values("ape", ascending=False).head(12)
    unequal = nets[~nets["params_equal"]]
    text = [HEAD.format(seconds=seconds), "## Summary\n", summary.round(3).to_markdown(index=False),
            "\n## Furthest off (where measured)\n", worst.round(3).to_markdown(index=False),
            "\n## Parameter counts that differ, or traces that failed\n",
            unequal.to_markdown(index=False) if len(unequal) else "none",
            "\n## Every network\n", nets.round(2).to_markdown(index=False), ""]
    DOC.write_text("\n".join(text))
    print(f"wrote {DOC}")


HEAD = """# Every torchvision classification network, traced as a user's module (issue 36)

Written by `PYTHONPATH=. <venv with torch 2.14 + torchvision 0.29.1>/bin/python
benchmarks/layerwise_torchvision_all.py` ({seconds:.0f} s on two cores). Each network of
`torchvision.models.list_models(module=torchvision.models)` is asked as
`torchvision.models:NAME(num_classes=1000)` (built on the meta device and traced, not the
shipped spec), batch 12, at 224 px (Inception v3: 299 px, the side it needs). Parameters
are compared with `sum(p.numel())` of the same builder.
Where `torchvision_bench` measured the network (RTX 2080 Ti, TITAN RTX, A100, TITAN Xp; fp32
and pure fp16; batch 12; forward + loss + backward), the product's answer (shipped predictor,
which was fitted on those same measurements: this is a check of the traced route, not a
transfer figure; `docs/lab/layerwise-transfer.md` has those) is compared with the measured step.
"""


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
