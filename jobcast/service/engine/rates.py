"""The rate route: seconds per iteration of the runs that did this job before.

The plainest forecast from history, and the one to beat: a system's own mean seconds per
iteration of its latest runs times the asked iterations. It is always a candidate where such
runs exist, so the selector, fitted by backtest, can never do worse than it on the backtest.

Rules (:class:`RateRoute.propose`):

* **Runs**: the run summaries (``models.history``) of the network on the deployment keys the
  request matches (exact, else the GPU family), whose variant is compatible with the asked one
  (``models.variant.compatible``).
* **own-rate**: the named system's runs there. **fleet-rate**: the runs of every system at the
  asked batch size (the configuration a batch size names on one machine), offered when no
  system is named or the named one has no runs there.
* **Which runs**: those at the asked batch size where there are any (``batch`` relation
  ``same``), else all (``other``: the rate is taken per sample, times the asked batch). Of a
  variant the request left open, the one of the newest run (and the answer says it assumed
  it). Of the stacks left, the newest run's (``stack`` relation ``newest``); at most
  :data:`MAX_RUNS` of the newest runs of it. A fleet rate does this per system (a run
  without a system is its own).
* **Rate**: mean over those runs of ``seconds / iterations`` of the target: training, test,
  or for a whole job the run's wall time per training iteration (then the phases are set
  beside it from the same runs). A fleet rate is the median over systems of each system's
  mean rate: one fast or slow submitter does not move it (chosen on the ResNet corpus,
  per-round protocol, no system named: median over systems 0.99 % against 1.11 % for the
  newest stack's mean and 1.02 % for the mean of all runs; docs/lab/e2e-accuracy.md).
* **Extrapolated** when the rate is taken per sample (another batch size) or the asked
  iterations lie outside half the shortest to twice the longest of the runs behind it.
* **Own scale**: the between-run spread of the runs' rates (a t-quantile, times
  sqrt(1 + 1/n)), at least :data:`MIN_SPREAD`; one run: :data:`ONE_RUN_SCALE`; a fleet
  rate's is the spread of the systems' rates where there are several.
* **Robust levels** beside the own mean, from the same runs in start order (:func:`levels`),
  each its own candidate kind, so the backtest chooses between them (a kind no backtest has
  seen ranks after the mean by its fallback error): ``own-median`` (3 runs or more: one slow
  or fast run never sets it), ``own-recent`` (3 or more: weights halving with each older
  run, :data:`RECENT_HALF_LIFE`, the runs further than :data:`OUTLIER_SPREADS` robust
  spreads from the median left out, so an outlier never sets it alone) and ``own-trend``
  (:data:`MIN_TREND_RUNS` or more: Theil-Sen's slope of log rate over run order, one run
  ahead, kept within the runs' own range).
* ``own-line``: the target's seconds as a line in the runs' training iterations, ``a + b x``
  by least squares (:func:`line`), where the runs behind the mean (at the asked batch size)
  differ in length (``models.relation.lengths_bucket``: ``varied``): runs that train to a
  target accuracy stop at different epochs, and a whole run's seconds are not proportional
  to its steps: start-up and the tail add a fixed part, and evaluations that begin only
  after some epoch make a longer run's every step dearer (a negative ``a``; MLPerf UNet3D's
  runs differ 3x in length). The slope must be positive and the answer more than
  :data:`LINE_MIN_SHARE` of the mean rate's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from jobcast.service.engine.candidates import (
    Ask,
    Candidate,
    job_details,
    own_scale,
    target_columns,
    to_job,
)
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.route_registry import (
    FLEET_RATE,
    OWN_LINE,
    OWN_MEDIAN,
    OWN_RATE,
    OWN_RECENT,
    OWN_TREND,
    RATE,
    RegisteredRoute,
)
from models.history import phase_shares
from models.relation import Relation, lengths_bucket, runs_bucket
from models.variant import compatible, describe_variant, variant_dict, variant_key


def variant_phrase(have: str, asked: dict) -> str:
    """``, variant precision=fp16 for the asked precision=fp16`` (empty for no variant)."""
    if not have and not asked:
        return ""
    text = f", variant {describe_variant(have)}"
    return text + (f" for the asked {describe_variant(variant_key(asked))}" if asked else "")

MAX_RUNS = 10
MIN_SPREAD = 0.001
ONE_RUN_SCALE = 0.03
RECENT_HALF_LIFE = 1.0  # runs: each older run weighs half the one after it
OUTLIER_SPREADS = 4.0  # robust spreads from the median that make a run an outlier
MIN_LEVEL_RUNS = 3  # runs a median or recency-weighted level needs
MIN_TREND_RUNS = 4  # runs a trend needs
LINE_MIN_SHARE = 0.5  # a line's answer below this share of the mean rate's is not physical


def line(iterations: np.ndarray, seconds: np.ndarray, steps: float
         ) -> tuple[float, float, float] | None:
    """(seconds at ``steps``, intercept, slope) of the line through the runs (module rules,
    ``own-line``); None where their lengths differ too little or the fit is not physical."""
    x, y = np.asarray(iterations, float), np.asarray(seconds, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[ok], y[ok]
    if lengths_bucket(x) != "varied":
        return None
    b, a = np.polyfit(x, y, 1)
    at = float(a + b * steps)
    if b <= 0 or at <= LINE_MIN_SHARE * float(np.mean(y / x)) * steps:
        return None
    return at, float(a), float(b)


def levels(rates: np.ndarray) -> dict[str, tuple[float, str]]:
    """The robust levels of a system's rates in start order (module rules): kind -> (rate,
    how it was taken)."""
    n = len(rates)
    out: dict[str, tuple[float, str]] = {}
    if n < MIN_LEVEL_RUNS:
        return out
    logs = np.log(rates)
    mid = float(np.median(logs))
    out[OWN_MEDIAN] = (math.exp(mid), "median")
    spread = 1.4826 * float(np.median(np.abs(logs - mid)))
    keep = np.abs(logs - mid) <= max(OUTLIER_SPREADS * spread, 1e-9) if spread > 0 else \
        np.ones(n, dtype=bool)
    weights = 0.5 ** ((n - 1 - np.arange(n)) / RECENT_HALF_LIFE) * keep
    out[OWN_RECENT] = (math.exp(float(np.sum(weights * logs) / np.sum(weights))),
                         "recency-weighted mean (weights halving per older run, outliers out)")
    if n >= MIN_TREND_RUNS:
        from scipy import stats
        slope = float(stats.theilslopes(logs, np.arange(n, dtype=float)).slope)
        ahead = float(np.median(logs - slope * np.arange(n))) + slope * n
        ahead = min(max(ahead, float(logs.min())), float(logs.max()))
        out[OWN_TREND] = (math.exp(ahead), f"trend {100 * math.expm1(slope):+.1f} % a run, "
                                             "one run ahead")
    return out


def _date(t: float) -> str:
    if not (isinstance(t, float | int) and math.isfinite(t) and t > 0):
        return "undated"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def _spread(rates: np.ndarray) -> float:
    n = len(rates)
    if n < 2:
        return ONE_RUN_SCALE
    # Student's t quantile: scipy.stats.t.ppf(0.95, n - 1) is this very function, without
    # the second of import scipy.stats costs a fresh process
    from scipy.special import stdtrit
    sd = float(np.std(np.log(rates), ddof=1))
    return max(MIN_SPREAD, float(stdtrit(n - 1, 0.95)) * sd * math.sqrt(1 + 1 / n))


class RateRoute(RegisteredRoute):
    """Mean seconds per iteration of the latest matching runs (module rules)."""

    route = RATE
    costly = False

    def __init__(self, history: pd.DataFrame):
        self.history = history
        self._by_network = {k: g for k, g in history.groupby("network")} if len(history) else {}

    def runs_for(self, ask: Ask) -> pd.DataFrame:
        """The runs of the network on the matched keys with a compatible variant."""
        runs = self._by_network.get(ask.req.network.lower())
        if runs is None or not ask.keys:
            return self.history.iloc[0:0]
        runs = runs[runs["deployment"].isin(ask.key_names)]
        if ask.variant and len(runs):
            runs = runs[runs["variant"].map(lambda v: compatible(v, ask.variant))]
        return runs

    def propose(self, ask: Ask) -> list[Candidate]:
        """The own-rate candidate (the named system's runs) with its robust levels, else the
        fleet-rate one (module rules); none without steps or a batch size."""
        if ask.iterations is None or ask.req.batch_size is None:
            return []
        runs = self.runs_for(ask)
        if runs.empty:
            return []
        out: list[Candidate] = []
        own = runs[runs["system"] == ask.system] if ask.system else runs.iloc[0:0]
        if len(own):
            found = self._candidate(ask, own, OWN_RATE, "own")
            out += [found, *self._levels(found, ask)] if found else []
        if not len(own):
            same = runs[runs["batch_size"] == ask.req.batch_size]
            found = self._candidate(ask, same, FLEET_RATE,
                                    "other" if ask.system else "any") if len(same) else None
            out += [found] if found else []
        return out

    def _levels(self, mean: Candidate, ask: Ask) -> list[Candidate]:
        """The robust-level candidates beside the own mean ``mean`` (module rules): the same
        runs and relation, another rate; a whole job's phases scaled with it
        (:func:`job_details`, so ``wall_with_init`` follows)."""
        details = mean.forecast.details
        rates = np.asarray(details.get("rates", ()), dtype=float)
        base = details["rate_seconds_per_iteration"]
        found = dict(levels(rates))
        steps = float(ask.iterations or 0)
        if mean.relation.batch == "same" and steps > 0:
            lengths = np.asarray(details.get("lengths", ()), dtype=float)
            fit = line(lengths, lengths * rates, steps)
            if fit is not None:
                found[OWN_LINE] = (fit[0] / steps, f"line {fit[1]:+.4g} s and {fit[2]:.4g} s "
                                                     "per iteration through")
        phases = details.get("phases")
        out = []
        for kind, (rate, how) in found.items():
            factor = rate / base
            reason = mean.reason.replace(f"{OWN_RATE}: mean", f"{kind}: {how} of the", 1)
            f = mean.forecast.scaled(factor)
            extra: dict = {"chosen": reason, "rate_seconds_per_iteration": rate}
            if isinstance(phases, dict):
                extra |= job_details(phases["train"] * factor, phases["test"] * factor,
                                     phases["gaps"] * factor, phases.get("init", math.nan),
                                     f.seconds, details["whole_job"])
            out.append(replace(mean, forecast=replace(f.with_details(**extra), why=reason),
                               relation=replace(mean.relation, kind=kind), reason=reason))
        return out

    def _pick(self, ask: Ask, runs: pd.DataFrame, fleet: bool = False
              ) -> tuple[pd.DataFrame, str, str, str]:
        """(runs used, batch relation, variant relation, note on an assumed variant); a
        ``fleet`` keeps each system's newest stack instead of the newest run's."""
        same = runs[runs["batch_size"] == ask.req.batch_size]
        batch = "same" if len(same) else "other"
        runs = same if len(same) else runs
        runs = runs.sort_values("start_time", na_position="first")
        newest = runs.iloc[-1]
        variants = sorted(set(runs["variant"]))
        note = ""
        open_keys = set().union(*(variant_dict(v) for v in variants)) - set(ask.variant)
        if open_keys and len(variants) > 1:
            runs = runs[runs["variant"] == newest["variant"]]
            others = [describe_variant(v) for v in variants if v != newest["variant"]]
            note = (f"not asked, so assumed {describe_variant(newest['variant'])} (its newest "
                    f"runs); history also has {', '.join(others)}")
        if fleet:
            who = runs["system"].where(runs["system"] != "", runs["source"])
            last = runs.groupby(who)["stack_key"].transform("last")
            runs = runs[runs["stack_key"] == last].groupby(who.loc[runs.index]).tail(MAX_RUNS)
        else:
            runs = runs[runs["stack_key"] == newest["stack_key"]].tail(MAX_RUNS)
        if ask.variant:
            have = variant_dict(newest["variant"])
            variant = "asked" if all(k in have for k in ask.variant) else "unstated"
        else:
            variant = "assumed" if newest["variant"] else "unstated"
        return runs, batch, variant, note

    @staticmethod
    def _columns(ask: Ask) -> tuple[str, str]:
        """(seconds, iterations) columns of the target's rate."""
        return target_columns(ask.target)

    def _usable(self, ask: Ask, runs: pd.DataFrame) -> pd.Series:
        secs, its = self._columns(ask)
        return (runs[its] > 0) & (runs[secs] > 0)

    def _rates(self, ask: Ask, runs: pd.DataFrame) -> np.ndarray:
        secs, its = self._columns(ask)
        return runs[secs].to_numpy(float) / runs[its].to_numpy(float)

    def _candidate(self, ask: Ask, runs: pd.DataFrame, kind: str, system: str
                   ) -> Candidate | None:
        """The ``kind`` candidate from ``runs`` (None where none of them is usable)."""
        steps = ask.iterations
        if steps is None:
            return None
        fleet = kind == FLEET_RATE
        runs, batch, variant, note = self._pick(ask, runs, fleet)
        runs = runs[self._usable(ask, runs)]
        rates = self._rates(ask, runs)
        if not len(rates):
            return None
        per = runs["batch_size"].to_numpy(float)
        if batch == "other":
            rates = rates / per * ask.req.batch_size
        if fleet:
            who = runs["system"].where(runs["system"] != "", runs["source"]).to_numpy()
            by = pd.Series(rates).groupby(who).mean().to_numpy()
            rate = float(np.median(by))
            scale = _spread(by) if len(by) > 1 else _spread(rates)
        else:
            rate, scale = float(np.mean(rates)), _spread(rates)
        seconds = rate * steps
        low, high = seconds * math.exp(-scale), seconds * math.exp(scale)
        newest = runs.iloc[-1]
        n_sys = runs["system"].replace("", "unnamed").nunique()
        who = f"own history of system {ask.system}" if kind == OWN_RATE else (
            f"runs pooled over {n_sys} system{'s' * (n_sys != 1)}")
        what = "wall seconds per training iteration" if ask.target == "job" else (
            f"{ask.phase} seconds per iteration")
        missing = f"no history of system {ask.system}: " if system == "other" else ""
        stat = "median over systems of the mean" if fleet else "mean"
        reason = (f"{kind}: {missing}{stat} {what} of {who}, {len(rates)} run"
                  f"{'s' * (len(rates) != 1)} at batch "
                  + ("size " + str(ask.req.batch_size) if batch == "same"
                     else f"sizes {sorted(set(runs['batch_size']))} (per sample)")
                  + f", stack {newest['stack'] or 'unknown'!r} to {_date(newest['start_time'])}"
                  + variant_phrase(newest["variant"], ask.variant) + (f"; {note}" if note else ""))
        details = {"rate_seconds_per_iteration": rate, "runs": len(rates),
                   "rates": [float(r) for r in rates],
                   "lengths": [float(x) for x in runs[self._columns(ask)[1]]],
                   "evidence": {"runs": len(rates), "points": len(rates), "cv_error": None},
                   "thin": len(rates) < 2,
                   "variant": newest["variant"], "system": ask.system if kind == OWN_RATE
                   else "", "stack": newest["stack"], "chosen": reason,
                   "deployment_match": ask.how(newest["deployment"])}
        relation = Relation(kind=kind, target=ask.target, system=system, batch=batch,
                            variant=variant, stack="newest", runs=runs_bucket(len(rates)),
                            gpu=ask.gpu_relation(newest["deployment"], own=kind != FLEET_RATE),
                            age=ask.age(float(runs["start_time"].max())), devices=ask.devices)
        model = f"rate/{ask.req.network.lower()}/{newest['deployment']}/{ask.target}" + (
            "/" + "_".join(f"{k}:{v}" for k, v in variant_dict(newest["variant"]).items())
            if newest["variant"] else "")
        its = runs["train_iterations"]
        extrapolated = batch == "other" or not (
            0.5 * float(its.min()) <= steps <= 2.0 * float(its.max()))
        forecast = Forecast(job=ask.req, seconds=seconds, low=low, high=high, route=self.name,
                            model=model, extrapolated=extrapolated, details=details,
                            why=reason)
        cand = Candidate(forecast, relation, own_scale(seconds, low, high), reason,
                         tuple(int(r) for r in runs["run_id"]))
        if ask.target == "job":
            shares = phase_shares(runs)
            train = seconds / max(shares["wall"], 1e-12)
            note = f"wall time per training iteration of {len(rates)} runs"
            cand = replace(cand, forecast=forecast.with_details(**job_details(
                train, train * shares["test"], train * shares["gaps"], shares["init"], seconds,
                note)))
        return cand


__all__ = ["RateRoute", "to_job"]
