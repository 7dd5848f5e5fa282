"""Facts about the fitted end-to-end models of a key: how each is described
(:func:`describe_model`, a candidate's reason), which serves a named system (:func:`narrow`),
and the models layer's own fixed-rule lookup (:func:`select`).

The forecast does not call :func:`select`: the end-to-end route proposes every model that
may answer (``jobcast.service.engine.e2e_route``) and ``jobcast.service.engine.choice`` picks the
answer among all candidates by backtest. :func:`select` (through ``models.e2e.choose``) is for
callers that fit and ask one model without a selector (``benchmarks/calibration.py``, the
models' own tests); its reason reads like a forecast's ``chosen``, but no forecast quotes it.

Rules of :func:`select`, in order:

1. **Key**: models of the network, deployment and phase (and stack, compared by
   ``stack_key``, when the request names one).
2. **Variant** (``models.variant``): only models compatible with the asked variant (the
   request's precision and tags); a request for fp16 never gets an fp32 model. Among them,
   the best :func:`models.variant.variant_rank` (the asked keys stated, other keys at their
   defaults). None compatible: :class:`NoModelError` naming the variants there are.
3. **System**: a request that names a system gets, per stack and variant, that system's own
   model (own history, or its level on the pooled model when it has little), else the pooled
   model (which then says it holds no history of that system). A request without a system
   gets the pooled models (:func:`narrow`).
4. **Evidence** among what is left (stacks, variants of equal rank): first the models whose
   runs cover the job (no extrapolation), then those that are not thin (two runs or more
   and enough points), then the newest runs (newer software is often faster), then more
   runs, then the lower cross-validated error. A thin model is chosen over a solid one only
   when nothing else covers the job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

from models.dataset import stack_key
from models.errors import ModelError
from models.fitted import FittedModel
from models.variant import compatible, describe_variant, variant_dict, variant_key, variant_rank


class NoModelError(ModelError, LookupError):
    """No end-to-end model for the asked network x deployment x phase (x variant)."""

    kind: ClassVar[str] = "no_model"


@dataclass(frozen=True)
class Choice:
    """The model that answers and a short reason."""

    model: FittedModel
    reason: str


def _group(m: FittedModel) -> tuple:
    return (m.network, m.deployment, m.phase, stack_key(m.stack), m.variant)


def narrow(models: Sequence[FittedModel], system: str | None = None) -> list[FittedModel]:
    """Per stack and variant, the model that serves ``system`` (see rule 3)."""
    wanted = " ".join(system.split()) if system else ""
    by_group: dict[tuple, list[FittedModel]] = {}
    for m in models:
        by_group.setdefault(_group(m), []).append(m)
    out = []
    for group in by_group.values():
        own = [m for m in group if wanted and m.system == wanted]
        pooled = [m for m in group if m.system == ""]
        out += own or pooled or group
    return out


def _covers(m: FittedModel, iterations: float | None, batch_size: int | None) -> bool:
    if iterations is None or batch_size is None:
        return True
    return not m.estimator.extrapolates(iterations, batch_size)


def _rank(m: FittedModel, iterations: float | None, batch_size: int | None) -> tuple:
    cv = m.estimator.cv_mape_
    return (_covers(m, iterations, batch_size), not m.thin, m.last_run_time,
            m.estimator.n_runs_, -(cv if cv is not None and math.isfinite(cv) else math.inf))


def _size(m: FittedModel) -> str:
    e = m.estimator
    cv = "" if e.cv_mape_ is None else f", CV {e.cv_mape_:.2g} %"
    return f"{e.n_runs_} run{'s' * (e.n_runs_ != 1)}, {e.n_points_} points{cv}"


def _date(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d") if t > 0 else "undated"


def select(
    models: Sequence[FittedModel],
    network: str,
    deployment: str,
    phase: str,
    stack: str | None = None,
    iterations: float | None = None,
    batch_size: int | None = None,
    variant: Mapping[str, str] | str | None = None,
    system: str | None = None,
) -> Choice:
    """The model the fixed rules (module rules) give a request, and why; NoModelError when
    none. Not the forecast's choice (``jobcast.service.engine.choice``)."""
    wanted = None if stack is None else stack_key(stack)
    matches = [
        m for m in models
        if m.network == network.lower() and m.deployment == deployment and m.phase == phase
        and (wanted is None or stack_key(m.stack) == wanted)
    ]
    if not matches:
        known = sorted({f"{m.network} @ {m.deployment}" for m in models if m.phase == phase})
        hint = ", ".join(known[:12]) or "none (run `jobcast ingest` and `jobcast fit`)"
        raise NoModelError(
            f"no end-to-end {phase} model for network {network!r} on deployment {deployment!r}"
            + (f" with stack {stack!r}" if stack else "")
            + f"; models exist for: {hint}"
        )
    asked = variant_dict(variant)
    fits = [m for m in matches if compatible(m.variant, asked)]
    if not fits:
        seen = ", ".join(sorted({describe_variant(m.variant) for m in matches}))
        raise NoModelError(
            f"no end-to-end {phase} model of {describe_variant(variant_key(asked))} for network "
            f"{network!r} on deployment {deployment!r}; its history has: {seen}"
        )
    best_rank = max(variant_rank(m.variant, asked) for m in fits)
    compatible_fits = fits
    fits = narrow([m for m in fits if variant_rank(m.variant, asked) == best_rank], system)
    chosen = max(fits, key=lambda m: _rank(m, iterations, batch_size))
    reason = _reason(chosen, fits, asked, system, stack, iterations, batch_size)
    assumed = _assumed(chosen, compatible_fits, asked)
    return Choice(chosen, f"{reason}; {assumed}" if assumed else reason)


def _assumed(m: FittedModel, fits: list[FittedModel], asked: Mapping[str, str]) -> str:
    """One note on the variant keys the request left open while the key's history holds other
    stated values of them (e.g. fp16 and fp32 runs): what answered, what else there is and how
    to ask for it. Empty when nothing was left open."""
    have = variant_dict(m.variant)
    variants = [variant_dict(f.variant) for f in fits]
    keys = sorted({k for v in variants for k in v} - set(asked))
    used, also = [], []
    for key in keys:
        others = sorted({v[key] for v in variants if key in v} - {have.get(key, "")})
        if others:
            used.append(f"{key}={have[key]}" if key in have else f"{key} unstated")
            also += [f"{key}={v}" for v in others]
    if not also:
        return ""
    return (f"not asked, so assumed {', '.join(used)}; history also has {', '.join(also)} "
            "(choose with --precision or --tag key=value)")


def _reason(m: FittedModel, fits: list[FittedModel], asked: Mapping[str, str],
            system: str | None, stack: str | None, iterations, batch_size) -> str:
    parts = []
    wanted = " ".join(system.split()) if system else ""
    others = len(m.systems)
    if wanted and m.system == wanted and m.basis == "pooled-scaled":
        w = m.prior.get("weight")
        parts.append(
            f"system {wanted} has {_size(m)}: its level on the pooled model of "
            f"{m.prior.get('pooled_systems', '?')} systems, shrunk by evidence"
            + (f" (weight {w:.2f})" if isinstance(w, float) else ""))
    elif wanted and m.system == wanted:
        parts.append(f"own history of system {wanted} ({_size(m)})")
    elif wanted and wanted in m.systems:
        parts.append(f"own history of system {wanted} ({_size(m)}; the only system of its key)")
    elif wanted:
        parts.append(f"no history of system {wanted}: pooled model of {others} system"
                     f"{'s' * (others != 1)} ({_size(m)})")
    elif others > 1:
        parts.append(f"pooled over {others} systems ({_size(m)}); name a system for its own "
                     "history")
    else:
        parts.append(f"{_size(m)}")
    if asked:
        parts.append(f"variant {describe_variant(m.variant)} for the asked "
                     f"{describe_variant(variant_key(asked))}")
    elif m.variant:
        parts.append(f"variant {describe_variant(m.variant)}")
    stacks = {stack_key(f.stack) for f in fits}
    if stack is None and len(stacks) > 1:
        rivals = [f for f in fits if stack_key(f.stack) != stack_key(m.stack)]
        covering = _covers(m, iterations, batch_size)
        solid = not m.thin
        passed = [f for f in rivals if f.last_run_time > m.last_run_time]
        why = ("newest of the " if covering and solid else "") + f"{len(stacks)} stacks"
        if not covering:
            why = f"no stack's runs cover this job; of {len(stacks)} stacks"
        elif not solid:
            why = f"no solid stack covers this job; of {len(stacks)} stacks"
        note = f"stack {m.stack or 'unknown'!r} (runs to {_date(m.last_run_time)}): {why}"
        if passed:
            shown = "; ".join(f"{f.stack or 'unknown'!r} is newer but "
                              + ("extrapolates" if covering and not _covers(f, iterations,
                                                                           batch_size)
                                 else "thin")
                              + f" ({_size(f)})" for f in passed[:2])
            note += f"; passed over {shown}"
        parts.append(note)
    if m.thin:
        parts.append(f"thin evidence: interval from the pooled prior "
                     f"({m.estimator.interval_source_})")
    return "; ".join(parts)


def describe_model(m: FittedModel, system: str = "") -> str:
    """One phrase on a model for a candidate's reason: whose runs, how many, which stack and
    variant, and how new."""
    if system and (m.system == system or set(m.systems) == {system}):
        who = f"own model of system {system}"
        if m.basis == "pooled-scaled":
            who += f" (its level on the pooled model of {m.prior.get('pooled_systems', '?')} " \
                   "systems)"
    elif len(m.systems) > 1:
        who = f"model pooled over {len(m.systems)} systems"  # "pooled over N systems"
    elif m.systems:
        who = f"model of system {next(iter(m.systems))}"
    else:
        who = "model"
    variant = f", {describe_variant(m.variant)}" if m.variant else ""
    return (f"{who} ({_size(m)}), stack {m.stack or 'unknown'!r} (runs to "
            f"{_date(m.last_run_time)}){variant}")
