"""Property-based fuzzing (hypothesis, derandomized, bounded) of every log parser and the
``--jobs`` CSV reader, through the real ingest path into a real SQLite store.

Properties, for mutations of the real samples in tests/data (seven formats: jobcast
JSON-lines, Keras stdout, MLPerf v0.5, v0.6 and v0.7+, Caffe, tf_cnn_benchmarks):

* nothing but a :class:`~ingest.events.ParseError` escapes parse + check + store, and no
  parser fails inside (the pipeline's ``parser failed: ...`` safety net is never needed);
* a rejection names the file and gives a reason;
* every run that is stored reads back with finite, positive, in-range values only.

The mutations and the stored-value check are tests/fuzz_cases.py's (the seeded run
``benchmarks/fuzz_parsers.py`` uses the same; its longer run is in docs/lab/fuzz.md); hypothesis
draws the sample, the random choices of the mutations, and, in the targeted tests, the
hostile value.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fuzz_cases as FUZZ
import pytest
from fuzz_cases import assert_sane, numbered_lines, stores_per_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.store import Store

FORMATS = list(FUZZ.SAMPLES)
ORIGINALS = {s: s.path.read_bytes() for samples in FUZZ.SAMPLES.values() for s in samples}

# Bounded: derandomized (the same examples every run), no example database, no deadline
# (a loaded CI box is slow, never wrong); the whole file runs in well under a minute.
FUZZ_SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)

HOSTILE = st.one_of(
    st.sampled_from(FUZZ.HOSTILE_NUMBERS),
    st.integers().map(str),
    st.integers(min_value=10**17, max_value=10**400).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789-.eE+", min_size=1, max_size=12),
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Iterator[dict[str, Store]]:
    yield from stores_per_format(tmp_path_factory.mktemp("fuzz"), FORMATS)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_logs_are_stored_sanely_or_rejected(fmt, data, stores):
    sample = data.draw(st.sampled_from(FUZZ.SAMPLES[fmt]), label="sample")
    rnd = data.draw(st.randoms(use_true_random=False), label="random")
    mutated, names = FUZZ.mutate(rnd, ORIGINALS[sample])
    outcome = FUZZ.run_log_case(sample, mutated, stores[fmt])
    assert_sane(outcome, sample)


NUMBERED = {s: numbered_lines(data) for s, data in ORIGINALS.items()}


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_one_hostile_number_is_stored_sanely_or_rejected(fmt, data, stores):
    """One number of one line replaced by a value hypothesis draws (and shrinks)."""
    sample = data.draw(st.sampled_from(FUZZ.SAMPLES[fmt]), label="sample")
    lines = ORIGINALS[sample].split(b"\n")
    index = data.draw(st.sampled_from(NUMBERED[sample]), label="line")
    numbers = list(FUZZ.NUMBER.finditer(lines[index]))
    if not numbers:
        return
    m = data.draw(st.sampled_from(numbers), label="number")
    value = data.draw(HOSTILE, label="value").encode()
    lines[index] = lines[index][: m.start()] + value + lines[index][m.end():]
    outcome = FUZZ.run_log_case(sample, b"\n".join(lines), stores[fmt])
    assert_sane(outcome, sample)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_raw_bytes_and_cuts_are_stored_sanely_or_rejected(fmt, data, stores):
    """Bytes hypothesis draws (invalid UTF-8, NUL, CR, ...) spliced in, then a cut."""
    sample = data.draw(st.sampled_from(FUZZ.SAMPLES[fmt]), label="sample")
    original = ORIGINALS[sample]
    at = data.draw(st.integers(0, len(original)), label="at")
    junk = data.draw(st.binary(min_size=1, max_size=64), label="junk")
    end = data.draw(st.integers(at, len(original) + len(junk)), label="cut")
    mutated = (original[:at] + junk + original[at:])[:end]
    outcome = FUZZ.run_log_case(sample, mutated, stores[fmt])
    assert_sane(outcome, sample)


@settings(derandomize=True, database=None, deadline=None, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_jobs_csv_reader_never_crashes(data, tmp_path):
    """``jobcast predict --jobs``'s reader: a JobRequestError per bad row or file, else rows
    whose numbers are finite and in range once validated."""
    rnd = data.draw(st.randoms(use_true_random=False), label="random")
    mutated, _ = FUZZ.mutate(rnd, FUZZ.JOBS_CSV)
    if data.draw(st.booleans(), label="splice"):
        value = data.draw(HOSTILE, label="value").encode()
        mutated = mutated.replace(b",256,", b"," + value + b",", 1)
    outcome = FUZZ.run_jobs_case(mutated, Path(tmp_path))
    assert outcome.kind in ("rejected", "accepted"), outcome.detail


def test_the_fuzzer_sees_a_crash_and_nonsense():
    """The harness itself: a parser exception counts as a crash, and stored nonsense is seen
    (so the properties above could fail)."""
    run = {"batch_size": 32, "start_time": None, "accelerators_per_node": 1, "nodes": 1}
    seg = {"iterations": 10.0, "seconds": 0.0, "batch_size": 32, "start_time": None,
           "epoch_start": None, "epoch_end": None, "iteration_start": None,
           "iteration_end": None, "points": "[[10.0, 0.0]]"}
    assert "seconds" in FUZZ.nonsense(run, [seg])
    assert FUZZ.nonsense(run, [{**seg, "seconds": 1.5, "points": "[[10.0, 1.5]]"}]) is None
    assert "inf" in FUZZ.nonsense({**run, "start_time": float("inf")}, [seg])
    sample = FUZZ.SAMPLES["jsonl"][0]
    outcome = FUZZ.run_log_case(sample, ORIGINALS[sample], Store("sqlite://"),
                                parsers=[_Exploding()])
    assert outcome.kind == "crash" and "ZeroDivisionError" in outcome.detail


class _Exploding:
    """A parser with a bug: recognises everything, then divides by zero."""

    FORMAT = "exploding"

    def sniff(self, head):
        return True

    def parse(self, lines, ctx):
        return 1 // 0
