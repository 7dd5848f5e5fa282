"""Memory-bound layers in a PyTorch training step: three pricings compared, none shipped (issue 23).

The shipped pricing (:func:`layerwise.pricing.layer_entry`) gives a memory-bound layer (batch
norm, pooling, activation, add, concat) in a training step its forward price times
``1 + BACKWARD_RATIO[kind]`` (:data:`layerwise.as_run.BACKWARD_RATIO`: batch norm 3x, pooling
2.5x, add 1.5x). The forward price comes from rows timed in eval mode under ``no_grad``
(:mod:`layerwise.backends.torch_timing`): batch norm there is one scale-and-shift pass, while
training runs it on batch statistics and then backward. The H100's own bench rows
(``layerwise/data/measured/*memory-bound*``) time both; part 1 prints the ratio they give.

Part 2 prices every PyTorch whole-network target of ``benchmarks/layerwise_networks_v3.py``
four ways and scores the shipped composition form (``layerwise_networks_v6.scored``) on v3's
three splits (one GPU, one network, one network family out), beside the naive roofline rule:

1. ``shipped``: eval forward x (1 + BACKWARD_RATIO);
2. ``H100 ratios``: the same with the ratios raised to what part 1 measured (batch norm
   backward 5x its forward, pooling 4x, add 1.4x);
3. ``train query: bn``: batch norm's training step asked of the layer predictor (its
   training-step trees, learned from the H100's rows only), as for convolutions;
4. ``train query: all``: the same for all five memory-bound kinds.

Variants 2-4 are experiments: this script patches :mod:`layerwise.pricing` inside its own
process rather than adding switches to the library. Run (about 2 minutes)::

    .venv/bin/python benchmarks/layerwise_networks_v8.py [--no-doc]

Prints the tables and replaces (or appends) the section :data:`SECTION` of
``docs/layerwise-pytorch.md``; the rest of the document is kept.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import layerwise_networks_v6 as V6  # noqa: E402  (this folder, sys.path[0] of a script)
from layerwise_networks_v3 import SPLITS, md, network_family  # noqa: E402

from layerwise import as_run, pricing  # noqa: E402
from layerwise.corpora.network_fit import decomposable, network_sums  # noqa: E402
from layerwise.corpora.tables import shared_data_dir  # noqa: E402
from layerwise.corpora.torchvision_bench import pytorch_targets  # noqa: E402
from layerwise.roofline import family_of  # noqa: E402

SECTION_PREFIX = "## 10. Memory-bound layers in a PyTorch training step"
SECTION = SECTION_PREFIX + " (2026-12-01, not shipped)"
MEASURED = ROOT / "layerwise" / "data" / "measured" / \
    "h100-sxm5_torch2.11_2026-11-25_memory-bound.csv.gz"
MEMORY_KINDS = ("bn", "pool", "act", "add", "concat")
H100_RATIOS = {"bn": 5.0, "pool": 4.0, "add": 1.4}  # set from part 1 before part 2 ran
VARIANTS = {"shipped": {}, "H100 ratios": {"ratios": H100_RATIOS},
            "train query: bn": {"query": ("bn",)},
            "train query: all": {"query": MEMORY_KINDS}}


def measured_ratios(path: Path = MEASURED, min_elements: float = 2e7) -> pd.DataFrame:
    """Per kind and precision: the median time per element of the H100's training-step rows
    over that of its eval-mode forward rows, on tensors of at least ``min_elements`` (the
    bandwidth-bound end; the shapes are random, so forward and training rows differ)."""
    t = pd.read_csv(path)
    t = t[t["status"].astype(str).eq("ok")].copy()
    elements = t["batchsize"] * t["matsize"] ** 2 * t["channels_in"] * t["n_inputs"].fillna(1)
    t["ns_per_element"] = t["time_ms_median"] / elements * 1e6
    t["pass"] = np.where(t["optimizer"].eq("none"), "forward", "training")
    big = t[elements >= min_elements]
    med = big.groupby(["layer", "precision", "pass"])["ns_per_element"].median().unstack()
    n = big.groupby(["layer", "pass"]).size().unstack()
    out = (med["training"] / med["forward"]).unstack().round(2)
    out["rows (fwd/train)"] = [f"{n.loc[k, 'forward']}/{n.loc[k, 'training']}" for k in out.index]
    out["shipped total"] = [1 + as_run.BACKWARD_RATIO.get(k, as_run.DEFAULT_BACKWARD_RATIO)
                            for k in out.index]
    return out.reset_index()


@contextmanager
def variant(ratios: dict | None = None, query: tuple[str, ...] = ()) -> Iterator[None]:
    """Patch the pricing for one variant (module doc), restored on exit."""
    saved = dict(as_run.BACKWARD_RATIO)
    ask, entry, floor = pricing._ask, pricing.layer_entry, pricing.entry_floor
    as_run.BACKWARD_RATIO.update(ratios or {})
    if query:
        pricing._ask, pricing.layer_entry, pricing.entry_floor = _patched(set(query))
    try:
        yield
    finally:
        as_run.BACKWARD_RATIO.clear()
        as_run.BACKWARD_RATIO.update(saved)
        pricing._ask, pricing.layer_entry, pricing.entry_floor = ask, entry, floor


def _patched(kinds: set[str]) -> tuple[Callable, Callable, Callable]:
    """``_ask``, ``layer_entry``, ``entry_floor`` that price ``kinds`` in a PyTorch training
    step from the predictor's training-step query (the bench's training row: train-mode
    forward, backward with the input gradient, update)."""
    ask, entry, floor = pricing._ask, pricing.layer_entry, pricing.entry_floor

    def _ask(queries, row, precision, framework, hw, training, optimizer):
        if framework != "pytorch" or row["layer"] not in kinds \
                or not pricing.trains(row, training):
            return ask(queries, row, precision, framework, hw, training, optimizer)
        fwd = len(queries)
        queries.append(pricing.layer_query(row, "none", precision, framework, hw))
        queries.append(pricing.layer_query(row, optimizer, precision, framework, hw))
        return fwd, fwd + 1

    def layer_entry(row, method, fwd, train, cols, training, hw):
        if method != "predictor" or train is None or family_of(row["layer"]) == "gemm":
            return entry(row, method, fwd, train, cols, training, hw)
        out = entry(row, method, fwd, None, cols, training, hw)
        out.update({k: float(cols[c][train]) for k, c in
                    zip(("ms", "low_ms", "high_ms"), pricing.OUT, strict=True)}, kernels=3)
        return out

    def entry_floor(row, training, gemm_train, optimizer, ms, floors):
        if gemm_train and family_of(row["layer"]) != "gemm":
            return float(ms[floors[(row["layer"], optimizer)]])
        return floor(row, training, gemm_train, optimizer, ms, floors)

    return _ask, layer_entry, entry_floor


def main() -> None:
    from layerwise.shipped import default_predictor

    args = V6.cli_args(__doc__.splitlines()[0])
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    ratios = measured_ratios()
    print(ratios.to_string(), flush=True)
    predictor = default_predictor()
    targets, _ = decomposable(pytorch_targets(shared_data_dir()))
    rows = []
    for name, params in VARIANTS.items():
        with variant(**params):
            sums = network_sums(targets, predictor, framework="pytorch")
        sums = sums.assign(family=sums["network"].map(network_family))
        rows.append(V6.scored(sums, "pytorch", SPLITS).assign(rules=name))
        print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    every = pd.concat(rows, ignore_index=True)
    order = {n: i for i, n in enumerate(VARIANTS)}

    splits = V6.summary(every, ["split", "rules"], order)
    gpus = V6.summary(every[every["split"].eq("one GPU out")], ["chip", "rules"], order)
    for t in (splits, gpus):
        print(t.round(2).to_string(), flush=True)
    seconds = time.perf_counter() - started
    if not args.no_doc:
        V6.replace_section(SECTION_PREFIX, [
            SECTION, "", "`.venv/bin/python benchmarks/layerwise_networks_v8.py`", "", INTRO,
            md(ratios), "", "Part 2, per split (MAPE %, median bias %, 90 % interval coverage; "
            "the naive rule is the roofline x one fitted efficiency on the same rows):", "",
            md(splits), "", "One GPU out, per GPU:", "", md(gpus), "", READING,
            f"\nRun time {seconds:.0f} s.\n"])
        print(f"wrote {V6.DOC} section in {seconds:.0f} s")


INTRO = """Part 1: the H100's memory-bound bench rows (PyTorch 2.11; tensors of at least 2e7
elements), median time per element of the training-step rows over the eval-mode forward
rows, per precision, beside the total the shipped pricing uses (1 + `BACKWARD_RATIO`).
"""

READING = """Reading (written after seeing the figures; the H100 ratios of variant 2 were read
from part 1 before part 2 was run, the rest are the variants as first tried).

- **The layer evidence is clear**: batch norm's training step costs 5.3-7.2x its
  eval-mode forward on the H100 (shipped: 3x), pooling 5.1-5.3x (2.5x) and add 2.4x
  (1.5x); the eval-mode forward is the wrong base for a training step.
- **The whole networks do not follow**: every variant helps one network out (15.5 ->
  14.9-15.0 %) and one family out (17.0 -> 16.0-16.3 %) and costs one GPU out (15.3 ->
  15.6-16.0 %), with the H100 left out worse each time (18.6 -> 18.8-19.9 %, bias +5 ->
  +7-8 %) (the other GPUs' composition, fitted with batch norm priced higher on
  their GPUs from rules read on the H100 alone, sets the H100's level too slow). No variant
  is better on all three splits, so none ships: the shipped pricing stays, and the
  whole-network residual keeps carrying the layer mix.
- Also tried the same day, not kept: a separate composition scale for half-precision
  tensor-core steps beside the TF32 ones (15.3 / 15.5 / 17.1 % against 15.3 / 15.5 /
  17.0 %)."""


if __name__ == "__main__":
    main()
