"""Train the shipped predictor on all shared data: layer efficiency, then whole-network composition.

    python -m layerwise.corpora.build_default [--out layerwise/data/default_predictor]

1. :class:`~layerwise.efficiency.EfficiencyPredictor` on every Justus (TF 1.10, six GPUs,
   forward and training step), NeuSight (PyTorch 2.1, five GPUs, forward) and measured
   (``layerwise/data/measured``: PyTorch 2.11 on an H100, four precisions, forward and
   training step) row, with leave-one-chip-out intervals for unseen GPUs and, for GEMMs,
   device-agnostic trees where a GPU lies beyond what its own rows or the training GPUs'
   specs cover (``docs/lab/layerwise-ops.md``).
2. The compositions of :func:`~layerwise.corpora.network_fit.fit_shipped_compositions`:
   TensorFlow on the Lambda tf_cnn_benchmarks networks (1 GPU, synthetic, training, fp32 and
   fp16, four GPUs) and PROFET's (TensorFlow 2.5, fp32, V100/T4/M60/K80) and PyTorch
   (``composition-pytorch.json``) on ``torchvision_bench`` and the
   measured H100 networks, each interval from residuals of GPUs left out inside the fit
   (``docs/lab/layerwise-pytorch.md``).
   ``benchmarks/layerwise_transfer.py`` scores whole networks on GPUs and generations left
   out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

import layerwise.forecast  # noqa: F401  (every module loaded now: a long fit sees one version)
from layerwise.corpora.network_fit import fit_shipped_compositions
from layerwise.corpora.tables import load_justus, load_measured, load_neusight, shared_data_dir
from layerwise.efficiency import EfficiencyPredictor
from layerwise.pricing import SHIPPED_DIR


def build(out: Path, max_iter: int = 400, justus_rows: int = 0,
          composition_only: bool = False) -> dict:
    """Fit, save into ``out`` and return a summary (rows, seconds, composition).

    ``composition_only``: keep the layer predictor saved in ``out``, refit the composition.
    """
    start = time.perf_counter()
    summary: dict = {}
    if composition_only:
        predictor = EfficiencyPredictor.load(out)
    else:
        j_rows, j_ms = load_justus(max_rows=justus_rows)
        n_rows, n_ms = load_neusight()
        m_rows, m_ms = load_measured()
        rows, ms = pd.concat([j_rows, n_rows, m_rows]), pd.concat([j_ms, n_ms, m_ms])
        predictor = EfficiencyPredictor(max_iter=max_iter).fit(
            rows, ms, progress=lambda chip: print(f"  interval fold without {chip}", flush=True))
        out.mkdir(parents=True, exist_ok=True)
        predictor.save(out)  # the long fit is kept even if a composition step fails
        summary.update(rows=int(len(rows)), justus_rows=int(len(j_rows)),
                       neusight_rows=int(len(n_rows)), measured_rows=int(len(m_rows)))
    fit_s = time.perf_counter() - start
    # the forms and targets chosen in docs/lab/layerwise-pytorch.md
    comps = fit_shipped_compositions(predictor, shared_data_dir())
    predictor.composition_ = comps["tensorflow"]
    predictor.framework_compositions_ = {"pytorch": comps["pytorch"]}
    out.mkdir(parents=True, exist_ok=True)
    for old in ("predictor.json", "conv.npz", "dense.npz"):
        (out / old).unlink(missing_ok=True)
    predictor.save(out)
    summary.update(fit_seconds=round(fit_s, 1), composition=predictor.composition_.to_dict(),
                   pytorch_composition=predictor.framework_compositions_["pytorch"].to_dict(),
                   bytes=int(sum(p.stat().st_size for p in out.iterdir())))
    return summary


def main() -> None:
    """Command line: build the shipped predictor (``--help`` lists the options)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SHIPPED_DIR)
    ap.add_argument("--max-iter", type=int, default=400)
    ap.add_argument("--justus-rows", type=int, default=0, help="subsample (0 = all rows)")
    ap.add_argument("--composition-only", action="store_true",
                    help="refit only the composition of the predictor saved in --out")
    args = ap.parse_args()
    print(json.dumps(build(args.out, args.max_iter, args.justus_rows, args.composition_only),
                     indent=1))


if __name__ == "__main__":
    main()
