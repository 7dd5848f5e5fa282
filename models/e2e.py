"""Fit one phase model per network x deployment x phase x stack x variant x system; look them up.

Runs of the same hardware with another framework version are not pooled: newer software
is often faster on the same GPUs. Nor are runs of another variant (precision, compiler,
data, user tags: ``models.variant``). Runs of different systems of one such key are pooled
into the key's **pooled** model (system ``""``), and each system also gets its own model
(``models.hierarchy``): from its own history where it has enough, else its level on the
pooled model's shape, shrunk toward the pooled one by evidence.

Rules
-----
* Keys: stacks are compared by :func:`models.dataset.stack_key` (case- and
  whitespace-insensitive), so spellings of one stack fit one model; the model shows the
  spelling of the stack's earliest run. The variant key is the canonical ``"k=v,k=v"`` string
  (``""`` for none), the system ``""`` for the pooled model. A key whose runs all come from
  one system (or none) has only the pooled model; it lists its systems (``systems``).
* Model ids (:func:`assign_ids`) are ``e2e/<network>/<deployment>/<phase>/<slug>`` with
  ``/<variant slug>`` appended for a variant (``compiler:xla_precision:fp16``: ``k:v`` pairs
  joined by ``_``) and ``/system:<system slug>`` for a system model; a slug is its text
  lower-cased with every run of characters other than ``a-z``, ``0-9``, ``.`` (and ``_`` in
  variant and system slugs) written ``-`` (``any`` for the unknown stack). Only characters
  MLflow allows in metric names appear (``jobcast.mlops.tracking`` logs one per model). Ids depend
  only on the key, never on the order of the data; a key without variant and system keeps
  the id it always had. Where distinct keys of one fit would share an id (stacks that
  differ in punctuation only, slugs over their length limit) each of them gets ``~`` and the
  first 10 hex digits of the SHA-1 of its key appended (for a key without variant and system:
  of its stack key, as before), so ids never collide; an id over :data:`ID_MAX` characters is
  cut and qualified the same way.
* A fit never stops at one key: a key that cannot be fitted, for any reason (too few
  points, unusable values, an id that would still collide), is a :class:`FitFailure` with
  its key and reason in the :class:`FitReport`, and the other keys are fitted. A run that
  cannot be used at all is a :class:`models.dataset.SkippedRun` of the report; a key left
  without any usable run is a failure naming them.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fleet.errors import BUG_KIND, ErrorInfo
from ingest.store import Store
from models.choice import Choice, NoModelError, select
from models.dataset import SkippedRun, collect_points, stack_key
from models.fitted import FittedModel

if TYPE_CHECKING:
    from models.phase_model import PhaseTimeModel

MIN_POINTS = 2
SLUG_MAX = 160  # longer stack slugs are cut and qualified; ids stay within the store's 512
VARIANT_SLUG_MAX = 80
SYSTEM_SLUG_MAX = 60
ID_MAX = 500
KEY_FIELDS = ("network", "deployment", "phase", "stack", "variant", "system")
FIT_FAILURE_KIND = "fit"  # the error kind of a key that could not be fitted

__all__ = ["Choice", "FittedModel", "NoModelError", "select"]  # callers import them here

# network, deployment, phase, stack key[, variant key, system]
Key = tuple[str, ...]


def stack_slug(stack: str | None) -> str:
    """The id part of a stack: its key with runs of other than ``[a-z0-9.]`` as ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", stack_key(stack)).strip("-") or "any"


def _slug(text: str, allowed: str, limit: int) -> tuple[str, bool]:
    """(slug, whether it was cut)."""
    slug = re.sub(rf"[^a-z0-9{allowed}]+", "-", text.casefold()).strip("-") or "x"
    return slug[:limit], len(slug) > limit


def _digest(stack: str, variant: str, system: str) -> str:
    text = stack_key(stack)
    if variant or system:
        text = "\x1f".join((text, variant, system))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:10]


def model_id(
    network: str, deployment: str, phase: str, stack: str, qualified: bool = False,
    variant: str = "", system: str = "",
) -> str:
    """The id of a key; ``qualified`` appends the key's digest (see the module doc)."""
    slug = stack_slug(stack)
    cut = len(slug) > SLUG_MAX
    slug = slug[:SLUG_MAX]
    parts = [f"e2e/{network}/{deployment}/{phase}/{slug}"]
    if variant:
        pairs = [pair.split("=", 1) for pair in variant.split(",")]
        text = "_".join(":".join(_slug(x, "._", VARIANT_SLUG_MAX)[0] for x in pair)
                        for pair in pairs)
        parts.append(text[:VARIANT_SLUG_MAX])
        cut = cut or len(text) > VARIANT_SLUG_MAX
    if system:
        sslug, scut = _slug(system, "._", SYSTEM_SLUG_MAX)
        parts.append("system:" + sslug)
        cut = cut or scut
    mid = "/".join(parts)
    if qualified or cut or len(mid) > ID_MAX - 11:
        mid = f"{mid[: ID_MAX - 11]}~{_digest(stack, variant, system)}"
    return mid


def _full(key: Key) -> tuple[str, str, str, str, str, str]:
    """A 4-tuple key (network, deployment, phase, stack) padded with no variant and system."""
    padded = tuple(key) + ("", "")[: max(0, 6 - len(key))]
    return padded[:6]  # type: ignore[return-value]


def assign_ids(keys: list[Key]) -> dict[Key, str]:
    """One id per key: plain where unique among ``keys``, qualified where plain ids collide.
    Keys are (network, deployment, phase, stack[, variant, system])."""

    def mid(key: Key, qualified: bool) -> str:
        network, deployment, phase, stack, variant, system = _full(key)
        return model_id(network, deployment, phase, stack, qualified=qualified,
                        variant=variant, system=system)

    plain = {key: mid(key, False) for key in keys}
    shared = Counter(plain.values())
    return {key: mid(key, shared[pid] > 1) for key, pid in plain.items()}


@dataclass(frozen=True)
class FitFailure:
    """A key that could not be fitted, and why; ``kind`` is its error kind: ``fit`` (the
    key's data), or ``bug`` (a bug in jobcast stopped it: ``models.hierarchy``)."""

    model_id: str
    network: str
    deployment: str
    phase: str
    stack: str
    reason: str
    runs: int
    points: int
    variant: str = ""
    system: str = ""
    kind: str = FIT_FAILURE_KIND

    def info(self) -> ErrorInfo:
        """The failure in the one error shape (:class:`fleet.errors.ErrorInfo`, kind
        ``fit``, or ``bug``)."""
        return ErrorInfo(kind=self.kind, message=self.reason)

    def to_dict(self) -> dict:
        """The ``jobcast fit --json`` entry: the key, its size, ``error`` (the reason, a
        string as before) and ``problem`` (:meth:`info`, the one error shape)."""
        return {
            "model": self.model_id,
            "network": self.network,
            "deployment": self.deployment,
            "phase": self.phase,
            "stack": self.stack,
            "variant": self.variant,
            "system": self.system,
            "runs": self.runs,
            "points": self.points,
            "error": self.reason,
            "problem": self.info().as_dict(),
        }

    def __str__(self) -> str:
        return f"{self.model_id} ({self.runs} runs, {self.points} points): {self.reason}"


@dataclass
class FitReport:
    """What a fit gave: the fitted models and the keys that failed, both in key order, and
    the runs skipped as unusable."""

    models: list[FittedModel] = field(default_factory=list)
    failures: list[FitFailure] = field(default_factory=list)
    skipped: list[SkippedRun] = field(default_factory=list)

    def skipped_elsewhere(self) -> list[SkippedRun]:
        """The skipped runs whose key was fitted all the same (the others are named by
        their key's failure)."""
        failed = {f.model_id for f in self.failures}
        return [r for r in self.skipped if r.model_id not in failed]


def check_form(form: str) -> None:
    """``form`` must be ``auto`` or one of :data:`models.phase_model.FORMS` (ValueError)."""
    from models.phase_curve import FORMS
    if form != "auto" and form not in FORMS:
        raise ValueError(f"unknown form {form!r}; choose auto or one of {sorted(FORMS)}")


def _fit_key(df: pd.DataFrame, form: str) -> PhaseTimeModel:
    """The fitted estimator of one key's rows; raises with the reason it cannot be fitted."""
    from models.phase_model import PhaseTimeModel
    if len(df) < MIN_POINTS:
        raise ValueError(f"{len(df)} progress point; a model needs at least {MIN_POINTS}")
    cols = ["iterations", "batch_size"] + (
        ["clock_resolution_s"] if "clock_resolution_s" in df.columns else [])
    est = PhaseTimeModel(form=form).fit(df[cols], df["seconds"], df["run_id"])
    if not (np.all(np.isfinite(est.coef_)) and math.isfinite(est.half_width_)):
        raise ValueError("the fit gave non-finite coefficients or interval")
    return est


def _reason(exc: Exception) -> str:
    text = str(exc) or "no message"
    return text if isinstance(exc, ValueError) else f"{type(exc).__name__}: {text}"


def keyed_points(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with the key columns filled (stack stripped, ``_stack_key``; no variant,
    system or resolution where a frame lacks them)."""
    keyed = points.assign(stack=points["stack"].fillna("").astype(str).str.strip())
    for col, default in (("variant", ""), ("system", ""), ("clock_resolution_s", 0.0)):
        keyed[col] = keyed[col].fillna(default) if col in keyed.columns else default
    keyed["_stack_key"] = keyed["stack"].map(stack_key)
    return keyed


def fit_report(points: pd.DataFrame, form: str = "auto",
               skipped: Iterable[SkippedRun] = ()) -> FitReport:
    """Fit every key of a progress-point table (see models.dataset); see the module doc.

    ``skipped``: runs left out as unusable (reported; a key with none usable fails).
    Raises ValueError only for an unknown ``form``; every per-key problem is a failure.
    """
    from models.hierarchy import fit_groups
    check_form(form)
    skipped = list(skipped)
    report = FitReport()
    keyed = keyed_points(points) if not points.empty else None
    seen = set() if keyed is None else {
        tuple(k) for k in keyed[["network", "deployment", "phase", "_stack_key", "variant"]]
        .drop_duplicates().itertuples(index=False)}
    orphans: dict[Key, list[SkippedRun]] = {}
    run_keys: list[Key] = []
    for run in skipped:
        for phase in run.phases or ("train",):
            group = (run.network, run.deployment, phase, stack_key(run.stack), run.variant)
            if group not in seen:
                orphans.setdefault(group + ("",), []).append(run)
        run_keys.append((run.network, run.deployment, (run.phases or ("train",))[0],
                         stack_key(run.stack), run.variant, ""))
    planned = [] if keyed is None else fit_groups(keyed, form, _fit_key)
    ids = assign_ids(list(dict.fromkeys([p.key for p in planned] + list(orphans))))
    report.skipped = [replace(run, model_id=ids.get(key, "")) for run, key
                      in zip(skipped, run_keys, strict=True)]
    taken: dict[str, Key] = {}
    for plan in planned:
        mid = ids[plan.key]
        network, deployment, phase, _, variant, system = plan.key
        if plan.error is None and mid in taken:
            plan.error = f"model id also names the key {taken[mid]}"
        if plan.error is not None:
            report.failures.append(FitFailure(mid, network, deployment, phase, plan.stack,
                                              plan.error, plan.runs, plan.points, variant,
                                              system, BUG_KIND if plan.bug else FIT_FAILURE_KIND))
            continue
        taken[mid] = plan.key
        assert plan.estimator is not None  # no error: fitted (hierarchy.fit_groups)
        report.models.append(
            FittedModel(model_id=mid, network=network, deployment=deployment, phase=phase,
                        stack=plan.stack, last_run_time=plan.last_run_time,
                        estimator=plan.estimator, sources=plan.sources, variant=variant,
                        system=system, basis=plan.basis, systems=plan.systems,
                        prior=plan.prior)
        )
    for key, runs in sorted(orphans.items()):
        network, deployment, phase, _, variant, system = key
        more = f" (and {len(runs) - 1} more)" if len(runs) > 1 else ""
        report.failures.append(FitFailure(
            ids[key], network, deployment, phase, runs[0].stack,
            f"no usable run: {runs[0]}{more}", len(runs), 0, variant, system))
    report.failures.sort(key=lambda f: f.model_id)
    return report


def fit_points(points: pd.DataFrame, form: str = "auto") -> list[FittedModel]:
    """The models :func:`fit_report` fits (keys that cannot be fitted are left out)."""
    return fit_report(points, form=form).models


def fit_store_report(store: Store, form: str = "auto") -> FitReport:
    """Fit all keys of the store's runs, replace the store's models with those fitted.

    Raises ValueError for an unknown ``form``, :class:`ingest.store.StoreError` when the
    models cannot be saved; failures of single keys and skipped runs are in the report.
    """
    check_form(form)
    points, skipped = collect_points(store)
    report = fit_report(points, form=form, skipped=skipped)
    store.save_models([m.to_record() for m in report.models])
    return report


def fit_store(store: Store, form: str = "auto") -> list[FittedModel]:
    """Fit and save all models from the store's runs (see :func:`fit_store_report`)."""
    return fit_store_report(store, form=form).models


def load_models(store: Store) -> list[FittedModel]:
    return [FittedModel.from_record(r) for r in store.load_models()]


def choose(
    models: list[FittedModel],
    network: str,
    deployment: str,
    phase: str,
    stack: str | None = None,
    iterations: float | None = None,
    batch_size: int | None = None,
    variant: Mapping[str, str] | str | None = None,
    system: str | None = None,
) -> FittedModel:
    """The model :func:`models.choice.select` chooses (see its rules for stack, variant,
    system and evidence)."""
    return select(models, network, deployment, phase, stack, iterations, batch_size,
                  variant, system).model


def forecast(model: FittedModel, iterations: float, batch_size: int,
             chosen: str | None = None) -> dict:
    """One phase forecast in seconds with its interval and the model's evidence (the service
    names the route); ``chosen`` says why this model answers."""
    if not (iterations >= 0 and math.isfinite(iterations)):
        raise ValueError(f"iterations must be a non-negative number, got {iterations}")
    if batch_size <= 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    row = model.estimator.predict_interval(
        pd.DataFrame({"iterations": [iterations], "batch_size": [batch_size]})
    ).iloc[0]
    out = {
        "seconds": float(row["seconds"]),
        "low": float(row["low"]),
        "high": float(row["high"]),
        "unit": "s",
        "model": model.model_id,
        "extrapolated": bool(row["extrapolated"]),
        "cv_mape": model.estimator.cv_mape_,
        "evidence": model.evidence(),
        "thin": model.thin,
        "interval_source": model.estimator.interval_source_,
        "basis": model.basis,
        "variant": model.variant,
        "system": model.system,
    }
    if chosen:
        out["chosen"] = chosen
    return out
