"""The choice: which candidate answers a request, why, and its interval (one module decides).

The forecaster (``jobcast.service.engine.forecaster``) gathers the routes' candidates; a
:class:`Chooser` judges each (the backtest selector, ``models.selector``, says how good a kind
of candidate is in its cell), tells the forecaster whether a costly route could still win,
and picks the answer. Which fitted model exists for a key and how it is described are facts
of ``models.choice``, read by the routes that propose.

Rules:

1. **Judge** (:meth:`Chooser.judge`): the backtest selector (fitted by ``jobcast fit`` on
   the store's own backtest, the shipped prior filling what the store cannot tell) gives
   each candidate its expected error and 90 % interval. A candidate that carries
   :data:`MIN_OWN_ERRORS` or more errors of its own backtest (a recurring job forecast from
   its earlier runs, ``models.whole_job.backtest``) is judged by them: its interval from
   their quantiles, its expected error theirs shrunk toward the selector's
   (``SelectorCells.with_own``), and the answer quotes them. A candidate no cell judges (no
   selector at all) ranks by its kind's fallback error
   (:func:`jobcast.service.engine.route_registry.fallback_errors`) with its own interval; the
   shipped prior's catch-all cell judges a kind it has never seen by the mean error over
   every kind, so a new route's fallback rank counts only until a backtest has seen it.
2. **Worth asking** (:meth:`Chooser.worth_asking`): a costly route (one that prices layers)
   is asked only while one of its kinds could beat the best candidate so far (the lowest
   expected error any cell gives that kind, :meth:`Chooser.best_possible`).
3. **Pick** (:meth:`Chooser.pick`): the candidate of lowest expected error (ties: the
   kinds' fallback rank, then the route's order).
4. **Answer** (:meth:`Chooser.answer`): the picked candidate's forecast with the
   selector's interval, why it was chosen (``chosen``: the candidate's reason and its
   backtest figure) and what else there was (``candidates``). Where the candidate sits at
   an end of its kind's backtest interval (that kind's backtest forecasts nearly all ran
   high, or all low: within :data:`EDGE_SHARE` of the interval's log width of an end), that
   end is the candidate's own, so the point is never an end of its interval (a warning says
   so); the point is not moved: such a cell is often another question's bias (the shipped
   prior's multi-GPU layerwise cell is MLPerf's fp16 runs asked without a precision). An
   answer from history from the named system's own runs of the asked length is never
   narrower than the spread of those runs (:func:`spread_floor`: the normal 90 % band of
   their seconds per iteration and sample), so a cell learnt on steadier jobs cannot make a
   noisier job's interval too narrow (pooled runs, or runs of other lengths, spread for
   reasons their kind's backtest cell has measured: a floor there stacked on the cell and
   over-covered). A candidate judged by its own backtest and scaled to another length
   (relation ``lengths`` ``varied``) keeps its own interval's ends where they are wider: its
   backtest speaks to the job at the length it ran.
5. **None**: no candidate is a :class:`ForecastFailure` naming the routes' own reasons
   (:func:`no_answer`), its error object of the first miss that says more than "no
   forecast" (:func:`miss_info`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from fleet.errors import ErrorInfo, JobcastError
from jobcast.service.engine.candidates import Candidate, fallback_error, target_columns
from jobcast.service.engine.forecast import NO_FORECAST, Forecast, ForecastFailure, percent_text
from jobcast.service.engine.route_registry import fallback_errors, kinds
from models.relation import Judgement, Relation, SelectorCells, cell_words

if TYPE_CHECKING:
    import pandas as pd

    from jobcast.service.engine.request import JobRequest

# The normal quantile of the 90 % band an answer's own runs' spread sets as its floor (rule 4)
SPREAD_Z = 1.645
# A candidate within this share of its interval's log width of one end is moved (rule 4)
EDGE_SHARE = 0.05
# A candidate with at least this many errors of its own backtest is judged by them (rule 1)
MIN_OWN_ERRORS = 3

Judged = list[tuple[Candidate, Judgement]]


class Chooser:
    """Judges candidates and picks the answer (module rules), with ``selector`` (None: every
    candidate ranks by its kind's fallback error)."""

    def __init__(self, selector: SelectorCells | None):
        self.selector = selector
        self._best: dict[str, float] = {}

    def judge(self, cand: Candidate) -> Judgement:
        """The selector's judgement of a candidate, else the fallback rank with the
        candidate's own interval (rule 1)."""
        found = self.selector.judge(cand.relation) if self.selector else None
        if len(cand.own_errors) >= MIN_OWN_ERRORS:
            cells = self.selector if self.selector is not None else SelectorCells()
            return cells.with_own(found, cand.own_errors, cand.own_cell)
        if found is not None:
            return found
        f = cand.forecast
        return Judgement(fallback_error(cand.relation), f.low / f.seconds,
                         f.high / f.seconds, "fallback", 0)

    def best_possible(self, kind: str) -> float:
        """The lowest expected error any candidate of ``kind`` could get (read once)."""
        if kind not in self._best:
            best = fallback_errors().get(kind, 1.0)
            if self.selector is not None:
                for name, cells in self.selector.cells_.items():
                    if name.startswith("kind"):
                        best = min([best] + [c[1] for k, c in cells.items()
                                             if k.startswith(f"kind={kind}|")
                                             or k == f"kind={kind}"])
            self._best[kind] = best
        return self._best[kind]

    def worth_asking(self, route_kinds: Sequence[str], judged: Judged) -> bool:
        """Whether a costly route of ``route_kinds`` could beat the candidates so far
        (rule 2)."""
        if not judged:
            return True
        best = min(j.expected for _, j in judged)
        return not all(self.best_possible(k) > best for k in route_kinds)

    @staticmethod
    def pick(judged: Judged) -> tuple[Candidate, Judgement]:
        """The candidate of lowest expected error (rule 3); ``judged`` is not empty."""
        order = {k: i for i, k in enumerate(kinds())}
        return min(enumerate(judged),
                   key=lambda t: (t[1][1].expected, order.get(t[1][0].kind, 99), t[0]))[1]

    def answer(self, judged: Judged,
               runs_behind: Callable[[Candidate], pd.DataFrame | None]) -> Forecast:
        """The picked candidate's answer (rules 3-4); ``runs_behind`` gives the run
        summaries behind a candidate (read only where they can set a spread floor)."""
        cand, j = self.pick(judged)
        rel = cand.relation
        floor = math.exp(spread_floor(runs_behind(cand) if floors(rel) else None, rel))
        return _answer(cand, j, judged, floor)


def _answer(cand: Candidate, j: Judgement, judged: Judged, floor: float) -> Forecast:
    """The chosen candidate's forecast with the selector's interval (never narrower than
    ``floor``, a factor), why it was chosen (``chosen``: its reason and its backtest figure,
    as clauses) and the others (rule 4)."""
    f = cand.forecast
    backtest = (f"backtest: {percent_text(j.expected_percent())} % mean error over {j.n} "
                f"forecasts of its kind ({cell_words(j.cell)})" if j.n else
                "no backtest of its kind yet: ranked by kind, own interval")
    chosen = (cand.reason, backtest)
    others = [{"kind": c.kind, "model": c.forecast.model, "seconds": c.forecast.seconds,
               "expected_error_percent": jj.expected_percent(), "reason": c.reason,
               "relation": c.relation.as_dict()} for c, jj in judged]
    details = {**f.details, "chosen": "; ".join(chosen), "why": cand.reason,
               "candidate": cand.kind,
               "backtest": {"expected_error_percent": j.expected_percent(),
                            "forecasts": j.n, "cell": j.cell},
               "relation": cand.relation.as_dict(), "candidates": others}
    low = min(f.seconds * j.low_factor, f.seconds / floor)
    high = max(f.seconds * j.high_factor, f.seconds * floor)
    if cand.own_errors and cand.relation.lengths == "varied":
        low, high = min(low, f.low), max(high, f.high)  # own backtest: at its own length
    if _lopsided(j):  # the side the backtest cannot speak to: the candidate's own
        ran_low = j.low_factor * j.high_factor > 1  # the point near the low end
        low, high = (min(low, f.low), high) if ran_low else (low, max(high, f.high))
        details["warnings"] = [*details.get("warnings", []), (
            f"the backtest forecasts of its kind ({j.n}) nearly all ran "
            f"{'low' if ran_low else 'high'}: the interval's "
            f"{'lower' if ran_low else 'upper'} end is the candidate's own")]
    return replace(f, low=low, high=high, details=details, why=cand.reason, chosen=chosen)


def floors(rel: Relation) -> bool:
    """Whether the runs behind an answer of relation ``rel`` set a spread floor: the asked
    system's own runs of the asked length (:func:`spread_floor`)."""
    return rel.system == "own" and rel.lengths == "same"


def spread_floor(rows: pd.DataFrame | None, rel: Relation) -> float:
    """The normal 90 % band of the spread between the runs behind an answer, ``1.645 sd
    sqrt(1 + 1/n)`` of their log seconds per iteration and sample for the target (wall for a
    job), n >= 2, for the asked system's own runs of the asked length (relation ``system``
    ``own``, ``lengths`` ``same``); 0 otherwise. Runs of other lengths spread by their length,
    not by chance (a line through them answers), and runs pooled over systems spread by
    system, which their kind's backtest cell has measured."""
    if rows is None or len(rows) < 2 or not floors(rel):
        return 0.0
    import numpy as np
    secs, its = target_columns(rel.target)
    per = rows[secs].to_numpy(float) / (rows[its].to_numpy(float)
                                        * rows["batch_size"].clip(lower=1).to_numpy(float))
    per = per[np.isfinite(per) & (per > 0)]
    if len(per) < 2:
        return 0.0
    return SPREAD_Z * float(np.std(np.log(per), ddof=1)) * math.sqrt(1 + 1 / len(per))


def _lopsided(j: Judgement) -> bool:
    """Whether the candidate sits at an end of its kind's backtest interval: within
    :data:`EDGE_SHARE` of its log width of one end (or outside it)."""
    lo, hi = math.log(j.low_factor), math.log(j.high_factor)
    width = hi - lo
    return width > 0 and min(-lo, hi) < EDGE_SHARE * width


def no_answer(req: JobRequest, misses: list[JobcastError], known: Sequence[str]) -> str:
    """Why nothing answered: the routes' own reasons, else what the history holds
    (``known``: its ``network @ deployment`` keys)."""
    if reasons := [str(m) for m in misses if str(m)]:
        return "; ".join(dict.fromkeys(reasons))
    where = req.deployment or req.device or "no deployment or device"
    shown = sorted(set(known))[:8]
    return (f"no history of network {req.network!r} on {where}"
            + (f" (history has: {', '.join(shown)})" if shown else "")
            + "; and no layerwise forecast of it")


def miss_info(text: str, misses: list[JobcastError]) -> ErrorInfo | None:
    """The error object of a request no route answered: the kind of the first miss that
    says more than "no forecast" (an unknown GPU or network, a bad spec), with the whole
    reason ``text``; None (kind ``no_forecast``) when no miss says more."""
    for miss in misses:
        info = miss.info()
        if info.kind != NO_FORECAST:
            return replace(info, message=text)
    return None


def no_candidate(req: JobRequest, misses: list[JobcastError], known: Sequence[str]
                 ) -> ForecastFailure:
    """The failure of a request no candidate answered (rule 5)."""
    text = no_answer(req, misses, known)
    return ForecastFailure(req, text, miss_info(text, misses))
