"""Memory for every network source, and the warning band (issue 36): a batch public data
shows running is never refused; within the estimate's measured error the answer warns "may
not fit"; beyond it, the job is refused."""

from __future__ import annotations

from jobcast.service.engine.feasibility import may_not_fit, memory_verdict
from jobcast.service.engine.forecaster import WILL_NOT_FIT, Forecaster
from jobcast.service.engine.request import JobRequest
from layerwise.memory_band import ISSUE_RUNS, WARN_BAND, band_rows, known_batches


def _ask(**kw) -> JobRequest:
    return JobRequest(**{"iterations": 10, "phase": "train", **kw})


def test_no_batch_published_as_running_is_refused(shared_data):
    runs = known_batches(shared_data)
    rows = band_rows(runs)
    assert {r.run.source for r in rows} >= {"profet", "lambda", "torchvision_bench", "issue 36"}
    assert len(rows) > 1000  # every source's rows were estimated, not skipped
    refused = [r for r in rows if r.ratio > WARN_BAND]
    assert not refused, refused[:5]
    # the band is the estimate's own error: some known runs need it (estimate over memory)
    assert max(r.ratio for r in rows) > 1.0


def test_vgg16_on_a_5gb_p2000_at_the_measured_batches_is_answered_with_a_warning():
    fc = Forecaster()
    for run in ISSUE_RUNS:
        answer = fc.forecast(_ask(network=run.network, device=run.gpu, batch_size=run.batch))
        assert answer.seconds > 0, answer
        assert answer.details["memory"]["fits"] is False
        assert any(w.startswith("may not fit: ") for w in answer.details["warnings"])


def test_beyond_the_band_the_job_is_refused():
    verdict = memory_verdict("vgg16", "Quadro P2000", batch_size=400)
    assert verdict is not None and not may_not_fit(verdict)
    out = Forecaster().forecast(_ask(network="vgg16", device="Quadro P2000", batch_size=400))
    assert not out.ok and out.problem.kind == WILL_NOT_FIT


def test_a_module_callable_network_gets_the_same_memory_check_as_its_name():
    fc = Forecaster()
    by_name = fc.forecast(_ask(network="convnext_tiny", device="V100", batch_size=2048))
    by_ref = fc.forecast(_ask(network="torchvision.models:convnext_tiny", device="V100",
                              batch_size=2048))
    assert not by_name.ok and by_name.problem.kind == WILL_NOT_FIT
    assert not by_ref.ok and by_ref.problem.kind == WILL_NOT_FIT
    assert by_ref.error == by_name.error


def test_a_json_spec_gets_a_memory_check():
    spec = ('{"name": "tiny", "input_shape": [224, 224, 3], "layers": ['
            '{"type": "conv", "filters": 64, "kernel": 3, "padding": "same"},'
            '{"type": "global_pool", "pool": "avg"}, {"type": "dense", "units": 10}]}')
    verdict = memory_verdict(spec, "T4", batch_size=64)
    assert verdict is not None and verdict.network == "tiny"
    assert memory_verdict(spec, "T4", batch_size=128).total_bytes > verdict.total_bytes
