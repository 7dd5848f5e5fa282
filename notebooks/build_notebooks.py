"""Write the notebooks from the cell sources below (run it after editing; CI executes them).

Keeping the sources here keeps diffs readable; the .ipynb files are committed without outputs.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).parent

SETUP = """\
import os, sys
from pathlib import Path
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path.cwd() if (Path.cwd() / "pyproject.toml").exists() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared" / "data"
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
%matplotlib inline"""

NOTEBOOKS = {
    "01_end_to_end.ipynb": [
        ("md", "# End-to-end forecasts from real training logs\n\n"
               "Ingest the bundled MLPerf and Caffe logs, fit one linear phase model per network x "
               "deployment x phase x software stack (`t = a + I (b + c B)`, non-negative, form "
               "chosen by leave-one-run-out cross-validation), and compare held-out predictions "
               "with the actual run totals and with the naive *mean seconds per iteration* "
               "baseline."),
        ("code", SETUP),
        ("code", """\
import tempfile
from jobcast.service.features.ingesting import ingest, ingest_options
from jobcast.service.features.stores import open_store
from models.dataset import progress_points
from models.e2e import fit_store

tmp = Path(tempfile.mkdtemp())
store = open_store(f"sqlite:///{tmp / 'nb.db'}")
logs = SHARED / "logs" if (SHARED / "logs").is_dir() else DATA
report = ingest(store, [str(logs / "mlperf")], workers=1)
caffe = sorted((logs / "caffe").glob("ducha_*.log"))
report2 = ingest(store, [str(p) for p in caffe], ingest_options(deployment="unknown-gpu-x1"),
                 workers=1)
print(report.stored + report2.stored, "files ingested;", report2.counts)
models = fit_store(store)
points = progress_points(store)
print(len(models), "models fitted")"""),
        ("md", "## Held-out predictions vs actual\n\nEvery run with company is predicted by its "
               "model refitted without it; the naive baseline multiplies the other runs' mean "
               "seconds per iteration by the run's iterations."),
        ("code", """\
from models.evaluation import held_out_predictions

pred = held_out_predictions(models, points)
held = pred[pred["cv_kind"] == "leave-one-run-out"].copy()
finals = points[points["final"]]
naive = []
for _, row in held.iterrows():
    m = next(m for m in models if m.model_id == row["model_id"])
    key = finals[(finals["network"] == m.network) & (finals["deployment"] == m.deployment)
                 & (finals["phase"] == m.phase) & (finals["stack"] == m.stack)]
    mine = key[key.source == row["source"]]
    rest = key[key.source != row["source"]]
    rate = (rest.seconds / rest.iterations).mean()
    naive.append(rate * float(mine.iterations.iloc[0]))
held["naive"] = naive
ape = lambda p: 100 * (p - held.actual).abs() / held.actual
print(f"model MAPE {ape(held.predicted).mean():.2f} %, naive {ape(held.naive).mean():.2f} %,"
      f" {len(held)} held-out run totals")
fig, ax = plt.subplots(figsize=(6, 6))
ax.scatter(held.actual, held.naive, marker="x", label="naive s/iteration")
ax.errorbar(held.actual, held.predicted,
            yerr=[held.predicted - held.low, held.high - held.predicted],
            fmt="o", capsize=2, label="jobcast (90 % interval)")
lim = [held[["actual", "predicted", "naive"]].min().min() * 0.8, held.actual.max() * 1.25]
ax.plot(lim, lim, "k--", lw=1, label="identity")
ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="actual (s)", ylabel="predicted (s)")
ax.legend(); ax.grid(alpha=.3); plt.show()"""),
        ("md", "## CaffeNet: one batch size to another\n\nFitted on batch 512 alone the model "
               "cannot separate per-step from per-sample cost; its interval at batch 128 is "
               "bounded by the two pure forms."),
        ("code", """\
from models.phase_model import PhaseTimeModel
cn = points[(points.network == "caffenet") & (points.phase == "train")]
if cn.batch_size.nunique() == 2:
    fit_on = cn[cn.batch_size == 512]
    m = PhaseTimeModel().fit(fit_on[["iterations", "batch_size"]], fit_on.seconds, fit_on.run_id)
    other = cn[(cn.batch_size == 128) & cn.final]
    out = m.predict_interval(other[["iterations", "batch_size"]])
    display(pd.concat([other[["iterations", "batch_size", "seconds"]].reset_index(drop=True),
                       out.reset_index(drop=True)], axis=1))
else:
    print("CaffeNet logs need both batch sizes (../shared/data/logs)")"""),
    ],
    "02_layerwise_published.ipynb": [
        ("md", "# Layer predictors on the published six-GPU data (Justus et al. 2018)\n\n"
               "Per-GPU predicted-vs-measured scatter on a held-out 10 % split and the "
               "leave-one-GPU-out error. To stay fast in CI this notebook trains the "
               "gradient-boosted predictor on a subsample; `benchmarks/layerwise_accuracy.py` "
               "gives the full figures (docs/lab/layerwise-accuracy.md)."),
        ("code", SETUP),
        ("code", """\
from threadpoolctl import threadpool_limits

from layerwise.published import load_published
from layerwise.predictor import LayerPredictor

# One OpenMP thread: on a shared, loaded machine the trees' threads otherwise wait on each
# other and the fits below take minutes instead of seconds.
threadpool_limits(1)

def quick_gbt(seen_gpus: bool):
    \"\"\"Gradient-boosted trees with fewer rounds and no refit, to keep CI fast. Only the
    forest that will answer is trained: the known-device forest for GPUs seen in training,
    the transfer forest (catalog peak FLOPS) for a held-out GPU; the other gets one round.\"\"\"
    params = ({"max_iter": 300, "transfer": False} if seen_gpus
              else {"max_iter": 1, "transfer_max_iter": 80})
    return LayerPredictor(model="gbt", refit=False, unseen_interval_refits=False,
                          params={"gbt": params})

PAPER_RMSE = {"conv": {"V100": 1.73, "P100": 3.32, "M60": 6.07, "K80": 7.84, "K40": 11.90,
                       "GTX1080Ti": 2.55},
              "dense": {"V100": .048, "P100": .033, "M60": .031, "K80": .145, "K40": .167,
                        "GTX1080Ti": .034}}
rng = np.random.default_rng(0)
if (SHARED / "justus2018").is_dir():
    frames = {kind: load_published(SHARED / "justus2018", layers=[kind])
              for kind in ("conv", "dense")}
else:  # a checkout without ../shared: the bundled slices (250 rows per GPU and layer)
    print("../shared/data/justus2018 not found: using the bundled slices in tests/data")
    frames = {kind: pd.read_csv(DATA / "justus2018" / f"{kind}_slice.csv.gz").assign(layer=kind)
              for kind in ("conv", "dense")}
{k: len(v) for k, v in frames.items()}"""),
        ("code", """\
rows = []
fig, axes = plt.subplots(2, 6, figsize=(20, 7))
for r, (kind, df) in enumerate(frames.items()):
    df = df.sample(n=min(len(df), 12000), random_state=0)
    test = df.groupby("gpu", group_keys=False).sample(frac=0.1, random_state=1)
    train = df.drop(test.index)
    model = quick_gbt(seen_gpus=True).fit(train)
    pred = model.predict(test)["predicted_ms"]
    for c, (gpu, t) in enumerate(test.groupby("gpu")):
        p = pred.loc[t.index]
        y = t["time_ms_median"]
        rmse = float(np.sqrt(np.mean((p - y) ** 2)))
        rows.append({"layer": kind, "gpu": gpu, "RMSE ms": rmse,
                     "paper RMSE ms": PAPER_RMSE[kind].get(gpu),
                     "MAPE %": float(np.mean(np.abs(p - y) / y) * 100)})
        ax = axes[r, c]
        ax.scatter(y, p, s=2, alpha=.3)
        lim = [max(y.min(), 1e-3), y.max()]
        ax.plot(lim, lim, "k--", lw=1)
        ax.set(xscale="log", yscale="log", title=f"{kind} {gpu}", xlabel="measured ms")
plt.tight_layout(); plt.show()
pd.DataFrame(rows)"""),
        ("md", "## Leave one GPU out\n\nTrain on five GPUs with their catalog hardware "
               "features, predict the sixth it never saw (conv layers)."),
        ("code", """\
conv = frames["conv"].sample(n=min(len(frames["conv"]), 12000), random_state=0)
logo = []
for gpu in sorted(conv.gpu.unique()):
    train, test = conv[conv.gpu != gpu], conv[conv.gpu == gpu]
    p = quick_gbt(seen_gpus=False).fit(train).predict(test)["predicted_ms"]
    y = test["time_ms_median"]
    logo.append({"held-out GPU": gpu, "MAPE %": float(np.mean(np.abs(p - y) / y) * 100)})
logo = pd.DataFrame(logo)
ax = logo.plot.bar(x="held-out GPU", y="MAPE %", legend=False, figsize=(7, 3.5))
ax.axhline(39.6, color="r", ls="--", label="paper, V100 held out (39.6 %)"); ax.legend(); plt.show()
logo"""),
    ],
    "03_whole_network.ipynb": [
        ("md", "# Whole networks: VGG16 layer by layer\n\nPer-layer time breakdown of VGG16 "
               "versus batch size and optimizer (the paper's figure 8), and the per-batch "
               "prediction versus batch size, with the shipped predictor on a V100."),
        ("code", SETUP),
        ("code", """\
from layerwise.forecast import forecast_network
net = "vgg16"  # the shipped VGG16 spec (224x224): its layers without TensorFlow
per = {}
for opt in ("none", "sgd", "adam"):
    for batch in (1, 8, 16, 32, 64):
        out = forecast_network(net, device="V100", batch_size=batch,
                               optimizer=None if opt == "none" else opt)
        per[(opt, batch)] = out
groups = {}
for (opt, batch), out in per.items():
    for layer in out["layers"]:
        if "ms" not in layer:  # the per-step call overhead entry
            continue
        kind = layer["layer"]
        groups.setdefault((opt, batch), {}).setdefault(kind, 0.0)
        groups[(opt, batch)][kind] += layer["ms"]
frame = pd.DataFrame(groups).T.fillna(0)
ax = frame.plot.bar(stacked=True, figsize=(10, 4), ylabel="ms per batch")
ax.set_title("VGG16 on V100: predicted time by layer type, (optimizer, batch)"); plt.show()
frame.round(2)"""),
        ("code", """\
batches = [1, 2, 4, 8, 16, 32, 64]
curves = {opt: [forecast_network(net, device="V100", batch_size=b, optimizer=opt) for b in batches]
          for opt in ("sgd", None)}
fig, ax = plt.subplots(figsize=(6, 4))
for opt, outs in curves.items():
    s = np.array([o["batch_seconds"] for o in outs]); lo = np.array([o["low"] for o in outs])
    hi = np.array([o["high"] for o in outs])
    ax.plot(batches, s * 1e3, "o-", label=f"{'training step, ' + opt if opt else 'forward only'}")
    ax.fill_between(batches, lo * 1e3, hi * 1e3, alpha=.2)
ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms per batch")
ax.legend(); plt.show()"""),
    ],
    "04_job_plan.ipynb": [
        ("md", "# Planning a job across deployments: time and cost\n\nResNet-50, 40 epochs of "
               "ImageNet: the GPUs asked (layerwise, or end-to-end where history matches) "
               "and, with `include_history`, every deployment the bundled logs have history "
               "of; one ranking per precision; cost from the (editable) price table."),
        ("code", SETUP),
        ("code", """\
import tempfile
from models.e2e import fit_store
from jobcast.service.features.compare import compare
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.features.ingesting import ingest
from jobcast.service.features.prices import load_prices
from jobcast.service.features.stores import open_store
store = open_store(f"sqlite:///{Path(tempfile.mkdtemp()) / 'plan.db'}")
ingest(store, [str(DATA / "mlperf")], workers=1); fit_store(store)
result = compare(Forecaster(store), load_prices(), "resnet50", batch_size=256, epochs=40,
                 devices=["V100", "T4", "A100 SXM4 40GB", "L4"], include_history=True)
table = pd.DataFrame(result["candidates"])
cols = [c for c in ["candidate", "source", "precision", "route", "gpus", "seconds", "low",
                    "high", "usd", "rank_time", "rank_cost", "error"] if c in table]
table[cols]  # one ranking per precision; history stating no precision ranked apart"""),
        ("code", """\
ok = table[table["rank_time"].notna()].copy()  # ranked rows: one precision each
ok["candidate"] = ok["candidate"] + " (" + ok["precision"] + ")"
ok["hours"] = ok["seconds"] / 3600
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
ok.plot.barh(x="candidate", y="hours", ax=axes[0], legend=False, title="time (h)")
ok[ok["usd"].notna()].plot.barh(x="candidate", y="usd", ax=axes[1], legend=False,
                                title="cost (USD)")
plt.tight_layout(); plt.show()"""),
    ],
}


def build() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nb.cells = [
            nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
            for kind, src in cells
        ]
        for index, cell in enumerate(nb.cells):  # stable ids: regenerating changes no line
            cell["id"] = f"cell-{index:02d}"
        nbformat.write(nb, HERE / name)


if __name__ == "__main__":
    build()
