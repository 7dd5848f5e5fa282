"""Property-based fuzzing (hypothesis, derandomized, bounded) of the PyTorch-era history
parsers: torchvision references, timm, Lightning (TQDM and Rich bars), Hugging Face
``trainer_state.json``, MMEngine (text log and ``scalars.json``) and Detectron2
``metrics.json``, through the real ingest path into a real SQLite store.

The samples are the real files of tests/data/frameworks (provenance there); the mutations,
the harness and the stored-value check are tests/fuzz_cases.py's (as
tests/ingest/test_fuzz_parsers.py uses them). Properties: nothing but a ParseError escapes,
no parser fails inside (the pipeline's safety net is never needed), a rejection names the
file and gives a reason, and every stored run reads back finite and in range. The longer
seeded run: ``benchmarks/fuzz_parsers.py --set history-b`` (docs/history-sources.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import fuzz_cases as FUZZ
import pytest
from fuzz_cases import assert_sane, numbered_lines, stores_per_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.store import Store

SAMPLES = FUZZ.HISTORY_B_SAMPLES
FORMATS = list(SAMPLES)
ORIGINALS = {s: s.path.read_bytes() for samples in SAMPLES.values() for s in samples}
NUMBERED = {s: numbered_lines(d) for s, d in ORIGINALS.items()}

FUZZ_SETTINGS = settings(
    derandomize=True, database=None, deadline=None, max_examples=20,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
HOSTILE = st.one_of(
    st.sampled_from(FUZZ.HOSTILE_NUMBERS),
    st.integers(min_value=10**17, max_value=10**400).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789-.eE+:", min_size=1, max_size=12),
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Iterator[dict[str, Store]]:
    yield from stores_per_format(tmp_path_factory.mktemp("fuzz_history"), FORMATS)


def test_the_unmutated_samples_are_stored(stores):
    for fmt, samples in SAMPLES.items():
        for sample in samples:
            outcome = FUZZ.run_log_case(sample, ORIGINALS[sample], stores[fmt])
            assert outcome.kind == "accepted", (sample.path, outcome.detail)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_logs_are_stored_sanely_or_rejected(fmt, data, stores):
    sample = data.draw(st.sampled_from(SAMPLES[fmt]), label="sample")
    rnd = data.draw(st.randoms(use_true_random=False), label="random")
    mutated, _ = FUZZ.mutate(rnd, ORIGINALS[sample])
    assert_sane(FUZZ.run_log_case(sample, mutated, stores[fmt]), sample)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_one_hostile_number_is_stored_sanely_or_rejected(fmt, data, stores):
    sample = data.draw(st.sampled_from(SAMPLES[fmt]), label="sample")
    lines = ORIGINALS[sample].split(b"\n")
    index = data.draw(st.sampled_from(NUMBERED[sample]), label="line")
    numbers = list(FUZZ.NUMBER.finditer(lines[index]))
    if not numbers:
        return
    m = data.draw(st.sampled_from(numbers), label="number")
    value = data.draw(HOSTILE, label="value").encode()
    lines[index] = lines[index][: m.start()] + value + lines[index][m.end():]
    assert_sane(FUZZ.run_log_case(sample, b"\n".join(lines), stores[fmt]), sample)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_raw_bytes_and_cuts_are_stored_sanely_or_rejected(fmt, data, stores):
    sample = data.draw(st.sampled_from(SAMPLES[fmt]), label="sample")
    original = ORIGINALS[sample]
    at = data.draw(st.integers(0, len(original)), label="at")
    junk = data.draw(st.binary(min_size=1, max_size=64), label="junk")
    end = data.draw(st.integers(at, len(original) + len(junk)), label="cut")
    assert_sane(FUZZ.run_log_case(sample, (original[:at] + junk + original[at:])[:end],
                                   stores[fmt]), sample)
