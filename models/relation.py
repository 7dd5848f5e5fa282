"""The light half of the backtest selector (``models.selector``): the relation of a candidate
to the request, the backtest cells and how they judge a candidate, and the shipped prior.

Serving a forecast only judges candidates, so this module imports neither pandas nor
scikit-learn (a known network's forecast loads no estimator library); fitting the cells is
:class:`models.selector.BacktestSelector` (a scikit-learn estimator on this class). The rules
are ``models.selector``'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

MIN_SCALE = 0.001  # a candidate's own 90 % log half-width is never taken below 0.1 %
PRIOR_PATH = Path(__file__).resolve().parent / "data" / "selector_prior.json"

# Relation fields, finest level first; every level ends with the candidate kind.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("kind", "target", "system", "batch", "lengths", "variant", "stack", "runs", "gpu",
     "devices", "age"),
    ("kind", "target", "system", "batch", "lengths", "stack", "runs", "devices", "age"),
    ("kind", "system", "batch", "lengths", "runs", "devices", "age"),
    ("kind", "system", "batch", "lengths", "devices", "age"),
    ("kind", "system", "batch", "lengths", "devices"),
    ("kind", "devices"),
    ("kind",),
    (),
)
# Runs whose longest is this many times their shortest differ in length ("varied"): runs
# that train to a target accuracy (MLPerf UNet3D's differ 3x), where a mean rate misleads
LENGTH_SPREAD = 1.1
# The ranking (expected error) reads the levels without ``age``: how old history is widens
# every candidate's interval alike, and its rare buckets are too thin to reorder the kinds
# (on the reference backtest the ranking with age was no better: 0.474 % against 0.475 %).
RANK_LEVELS: tuple[tuple[str, ...], ...] = tuple(
    dict.fromkeys(tuple(f for f in level if f != "age") for level in LEVELS))
# History older than this many days (newest run to the forecast) falls in each age bucket.
AGE_BUCKETS: tuple[tuple[float, str], ...] = ((2.0, "days"), (45.0, "weeks"), (400.0, "months"))
RELATION_FIELDS: tuple[str, ...] = LEVELS[0]


@dataclass(frozen=True)
class Relation:
    """How a candidate relates to the request (the selector's features).

    ``system``: ``own`` (the named system's history), ``other`` (a system was named, this is
    not its history), ``any`` (none named); ``batch``: ``same`` or ``other`` batch size than
    asked; ``variant``: ``asked`` (states what was asked), ``assumed`` (the request left it
    open), ``unstated`` (the history does not say); ``stack``: ``newest`` or ``older`` of the
    stacks that could answer, ``none`` where stacks do not apply; ``runs``: a bucket of the
    runs behind it (``1``, ``2``, ``3-5``, ``6+``, ``0`` for none); ``gpu``: ``exact``,
    ``family`` (a less specific name matched its family) or ``none``; ``target``: the phase
    forecast (``train``, ``test``, ``job``); ``lengths``: ``varied`` where the runs behind it
    and the job asked differ in training iterations (:func:`lengths_bucket`), else ``same``;
    ``age``: how old
    the newest run behind it is
    when the forecast is made (:func:`age_bucket`: ``days``, ``weeks``, ``months``, ``older``;
    ``unknown`` for undated history, ``none`` without history).
    """

    kind: str
    target: str = "train"
    system: str = "any"
    batch: str = "same"
    variant: str = "asked"
    stack: str = "newest"
    runs: str = "2"
    gpu: str = "exact"
    devices: str = "1"
    age: str = "unknown"
    lengths: str = "same"

    def as_dict(self) -> dict[str, str]:
        """The relation's fields as a dict (the selector's cell keys)."""
        return asdict(self)

    def describe(self) -> str:
        """A short phrase: ``own-rate, own system, same batch, 3-5 runs``."""
        parts = [self.kind]
        if self.system != "any":
            parts.append(f"{self.system} system")
        parts.append(f"{self.batch} batch")
        if self.gpu == "family":
            parts.append("GPU family")
        return ", ".join(parts)


def age_bucket(newest: float | None, now: float) -> str:
    """The ``age`` relation of history whose newest run started at ``newest`` (unix s)."""
    if newest is None or not math.isfinite(newest) or newest <= 0 or now <= 0:
        return "unknown"
    days = max(0.0, now - newest) / 86400.0
    return next((name for limit, name in AGE_BUCKETS if days < limit), "older")


def devices_bucket(n: int) -> str:
    """The ``devices`` relation of a job on ``n`` GPUs."""
    return "1" if n <= 1 else ("2-8" if n <= 8 else "9+")


def lengths_bucket(iterations: Sequence[float]) -> str:
    """The ``lengths`` relation of the runs behind a candidate: ``varied`` where the longest
    is :data:`LENGTH_SPREAD` times the shortest or more, else ``same``."""
    its = [float(x) for x in iterations if x is not None and math.isfinite(float(x)) and x > 0]
    return "varied" if len(its) >= 2 and max(its) >= LENGTH_SPREAD * min(its) else "same"


def runs_bucket(n: int) -> str:
    """The ``runs`` relation of ``n`` runs."""
    if n <= 0:
        return "0"
    if n <= 2:
        return str(n)
    return "3-5" if n <= 5 else "6+"


@dataclass(frozen=True)
class Cell:
    """Backtest statistics of one cell: count, mean |log error|, quantiles of the error."""

    n: int
    mean_abs: float
    q_low: float
    q_high: float
    bias: float

    def as_list(self) -> list[float]:
        """``[n, mean_abs, q_low, q_high, bias]``: the cell as stored in JSON."""
        return [self.n, self.mean_abs, self.q_low, self.q_high, self.bias]

    @classmethod
    def of(cls, errors: Sequence[float], tail: float) -> Cell:
        """The cell of signed log ``errors`` (at least one), quantiles at ``tail`` and
        ``1 - tail`` (linear between order statistics, as numpy's default)."""
        e = sorted(float(x) for x in errors)
        n = len(e)
        return cls(n, sum(abs(x) for x in e) / n, _quantile(e, tail), _quantile(e, 1 - tail),
                   sum(e) / n)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values (numpy's ``linear`` method)."""
    at = q * (len(ordered) - 1)
    lo = math.floor(at)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)


@dataclass(frozen=True)
class Judgement:
    """What the selector says of one candidate: expected |log error|, the 90 % interval
    factors (multiply the point), and which cell answered with how many backtest errors."""

    expected: float
    low_factor: float
    high_factor: float
    cell: str
    n: int
    bias: float = 0.0  # the cell's mean signed log error ln(actual / forecast)

    def expected_percent(self) -> float:
        """The expected error as a percentage of the forecast: ``100 (e^expected - 1)``."""
        return 100.0 * math.expm1(self.expected)


def cell_judgement(used: Cell, name: str, expected: float) -> Judgement:
    """The judgement a cell gives (``models.selector`` rules): its quantiles widened by
    ``1 + 1 / sqrt(n)``, never narrower than +-:data:`MIN_SCALE`."""
    widen = 1.0 + 1.0 / math.sqrt(max(used.n, 1))
    # the forecast is multiplied by exp(error): its low end by the low quantile
    low = min(used.q_low * widen, -MIN_SCALE)
    high = max(used.q_high * widen, MIN_SCALE)
    return Judgement(float(expected), math.exp(low), math.exp(high), name, used.n, used.bias)


def _key(values: Mapping[str, Any], level: Sequence[str]) -> str:
    return "|".join(f"{f}={values[f]}" for f in level) or "*"


# A cell's relation values in words (:func:`cell_words`); a value not listed reads as itself.
_WORDS: dict[str, dict[str, str]] = {
    "target": {"job": "whole jobs", "train": "training", "test": "evaluation"},
    "system": {"own": "the job's own system", "other": "another system than the one named",
               "any": "any system"},
    "batch": {"same": "the same batch size", "other": "another batch size"},
    "lengths": {"same": "the same length", "varied": "another length"},
    "variant": {"asked": "the variant asked", "assumed": "an assumed variant",
                "unstated": "history stating no variant"},
    "stack": {"newest": "the newest software stack", "older": "an older software stack",
              "none": ""},
    "gpu": {"exact": "the same GPU", "family": "the GPU's family", "none": ""},
    "age": {"none": "", "unknown": "undated history", "days": "history days old",
            "weeks": "history weeks old", "months": "history months old",
            "older": "history over a year old"},
}


def cell_words(cell: str) -> str:
    """A backtest cell (``kind,target,...:kind=layerwise|target=job|...``, as a
    :class:`Judgement` names it) in words: ``layerwise answers for whole jobs: any system,
    another batch size, ..., 1 GPU``; the catch-all cell is ``every kind of answer``."""
    values = dict(pair.split("=", 1) for pair in cell.partition(":")[2].split("|")
                  if "=" in pair)
    if not values:
        return "every kind of answer" if cell.endswith("*") else cell
    head = f"{values.pop('kind')} answers" if "kind" in values else "answers"
    if "target" in values:
        head += f" for {_WORDS['target'].get(values.pop('target'), 'its target')}"
    parts = []
    for name, value in values.items():
        if name == "runs":
            parts.append("no runs behind it" if value == "0" else f"{value} runs behind it")
        elif name == "devices":
            parts.append(f"{value} GPU{'' if value == '1' else 's'}")
        else:
            parts.append(_WORDS.get(name, {}).get(value, f"{name} {value}"))
    return ": ".join([head, ", ".join(p for p in parts if p)]) if any(parts) else head


class SelectorCells:
    """Judges candidates from fitted backtest cells (``models.selector`` rules); what
    :class:`models.selector.BacktestSelector` fits. Fitted attributes: ``cells_``, ``n_``,
    ``kinds_``."""

    cells_: dict[str, dict[str, list[float]]]
    n_: int
    kinds_: list[str]

    def __init__(self, min_count: int = 8, shrink: float = 20.0, coverage: float = 0.90,
                 slack: float = 0.0):
        self.min_count = min_count
        self.shrink = shrink
        self.coverage = coverage
        self.slack = slack

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (scikit-learn's ``get_params`` where the subclass is an
        estimator)."""
        return {"min_count": self.min_count, "shrink": self.shrink, "coverage": self.coverage,
                "slack": self.slack}

    # -- judging ---------------------------------------------------------------------

    def _cells(self, relation: Mapping[str, Any],
               levels: tuple[tuple[str, ...], ...] = LEVELS) -> list[tuple[str, Cell]]:
        """The cells of ``relation`` that exist at ``levels``, finest first."""
        found = []
        for level in levels:
            name = ",".join(level) or "*"
            raw = self.cells_.get(name, {}).get(_key(relation, level))
            if raw is not None:
                found.append((f"{name}:{_key(relation, level)}", Cell(int(raw[0]), *raw[1:])))
        return found

    def judge(self, relation: Mapping[str, Any] | Relation) -> Judgement | None:
        """The expected error and interval of a candidate; None when no cell knows it."""
        rel = relation.as_dict() if isinstance(relation, Relation) else dict(relation)
        rel.setdefault("age", "unknown")
        rel.setdefault("devices", "1")
        rel.setdefault("lengths", "same")
        cells = self._cells(rel)
        ranked = self._cells(rel, RANK_LEVELS)
        if not cells or not ranked:
            return None
        coarse_first = [cell for _, cell in reversed(ranked)]
        expected = coarse_first[0].mean_abs
        for cell in coarse_first[1:]:  # coarse to fine, each shrunk toward its parent
            expected = (cell.n * cell.mean_abs + self.shrink * expected) / (cell.n + self.shrink)
        name, used = next(((k, c) for k, c in cells if c.n >= self.min_count), cells[-1])
        return cell_judgement(used, name, float(expected))

    @property
    def tail(self) -> float:
        """The error quantile each end of an interval is read at (module rules)."""
        return max(1.0 - self.coverage - self.slack, 0.0) / 2.0

    def with_own(self, judged: Judgement | None, errors: Sequence[float], cell: str
                 ) -> Judgement:
        """A candidate's judgement from its own backtest ``errors`` (a recurring job's
        rolling forecasts of its own runs): the interval from their quantiles, the expected
        error theirs shrunk toward ``judged``'s (the selector's, when it has one) with weight
        ``shrink``, as a fine cell is toward its parent."""
        own = Cell.of(errors, self.tail)
        expected = own.mean_abs if judged is None else (
            (own.n * own.mean_abs + self.shrink * judged.expected) / (own.n + self.shrink))
        return cell_judgement(own, cell, expected)

    # -- persistence -----------------------------------------------------------------

    def to_dict(self) -> dict:
        """The fitted cells as JSON (parameters, cells, error count, kinds)."""
        return {"params": self.get_params(), "cells": self.cells_, "n": self.n_,
                "kinds": self.kinds_}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectorCells:
        """The selector saved by :meth:`to_dict`."""
        sel = cls(**data.get("params", {}))
        sel.cells_ = {k: dict(v) for k, v in data["cells"].items()}
        sel.n_ = int(data.get("n", 0))
        sel.kinds_ = list(data.get("kinds", []))
        return sel

    def _blend(self, mine: Sequence[float], prior: Sequence[float]) -> list[float]:
        """A cell both hold: this one's shrunk toward the prior's with weight ``shrink``
        (module rules); its count is this one's plus ``shrink``."""
        own, other = Cell(int(mine[0]), *mine[1:]), Cell(int(prior[0]), *prior[1:])
        k = min(self.shrink, other.n)
        w = own.n / (own.n + k)
        return Cell(own.n + int(k), *(w * a + (1 - w) * b for a, b in zip(
            (own.mean_abs, own.q_low, own.q_high, own.bias),
            (other.mean_abs, other.q_low, other.q_high, other.bias), strict=True))).as_list()

    def combine(self, prior: SelectorCells | None) -> SelectorCells:
        """This selector's cells with the prior's: a cell only one holds is that one's, a
        cell both hold this one's shrunk toward the prior's (module rules)."""
        if prior is None:
            return self
        out = type(self)(**self.get_params())
        out.cells_ = {}
        for name in set(self.cells_) | set(prior.cells_):
            mine, theirs = self.cells_.get(name, {}), prior.cells_.get(name, {})
            merged = dict(theirs)
            for key, raw in mine.items():
                merged[key] = raw if key not in theirs else self._blend(raw, theirs[key])
            out.cells_[name] = merged
        out.n_ = self.n_ + prior.n_
        out.kinds_ = sorted(set(self.kinds_) | set(prior.kinds_))
        return out


@lru_cache(maxsize=4)
def load_prior(path: Path = PRIOR_PATH) -> SelectorCells | None:
    """The shipped selector (None when the package has none); read once per process (it is
    never changed: :meth:`SelectorCells.combine` makes a new one)."""
    if not path.is_file():
        return None
    return SelectorCells.from_dict(json.loads(path.read_text(encoding="utf-8")))
