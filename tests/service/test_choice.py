"""One module makes the choice (issue 38): ``jobcast.service.engine.choice`` judges the candidates,
says whether a costly route could still win, picks the answer and sets its interval.

The candidates are real ones of the registered kinds (a :class:`Forecast` with its relation);
without a selector every candidate ranks by its kind's fallback error.
"""

from __future__ import annotations

from jobcast.service.engine.candidates import Candidate, own_scale
from jobcast.service.engine.choice import Chooser
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import LAYERWISE, fallback_errors, kinds, route_specs
from models.relation import Judgement, Relation

REQ = JobRequest("resnet50", "1x V100", batch_size=64, iterations=1000)


def _cand(kind: str, seconds: float) -> Candidate:
    f = Forecast(job=REQ, seconds=seconds, low=0.8 * seconds, high=1.25 * seconds,
                 route="test", model=f"test/{kind}", details={}, why=kind)
    return Candidate(f, Relation(kind=kind, target="test"), own_scale(f.seconds, f.low, f.high),
                     f"{kind}: test")


def test_without_a_selector_the_kind_of_lower_fallback_error_answers() -> None:
    best, worst = kinds()[0], kinds()[-1]
    chooser = Chooser(None)
    judged = [(c, chooser.judge(c)) for c in (_cand(worst, 100.0), _cand(best, 200.0))]
    answer = chooser.answer(judged, lambda _: None)
    assert answer.details["candidate"] == best
    assert answer.low <= answer.seconds <= answer.high
    assert [c["kind"] for c in answer.details["candidates"]] == [worst, best]


def test_a_costly_route_is_asked_only_while_its_kinds_could_win() -> None:
    chooser = Chooser(None)
    costly = next(s for s in route_specs() if s.name == LAYERWISE)
    lowest = min(chooser.best_possible(k) for k in costly.kinds)
    assert lowest == min(fallback_errors()[k] for k in costly.kinds)
    cand = _cand(kinds()[0], 100.0)
    better = Judgement(lowest / 2, 0.9, 1.1, "test", 10)
    worse = Judgement(lowest * 2, 0.9, 1.1, "test", 10)
    assert chooser.worth_asking(costly.kinds, [])
    assert not chooser.worth_asking(costly.kinds, [(cand, better)])
    assert chooser.worth_asking(costly.kinds, [(cand, worse)])


def test_a_point_at_an_end_of_its_cells_interval_keeps_its_own_end_and_warns() -> None:
    cand = _cand(kinds()[0], 100.0)
    at_low_end = Judgement(0.05, 1.0, 1.2, "kind=test", 40)  # every forecast ran low
    answer = Chooser(None).answer([(cand, at_low_end)], lambda _: None)
    assert answer.low == cand.forecast.low < answer.seconds < answer.high
    assert any("ran low" in w for w in answer.details["warnings"])


def test_the_forecaster_chooses_through_one_chooser() -> None:
    fc = Forecaster(None, prior=False)
    assert isinstance(fc.chooser, Chooser) and fc.chooser is fc.chooser
    assert fc.chooser.selector is fc.selector is None
