"""One meaning per name: a ``JobRequestError`` says what is wrong in a word as ``refusal``;
``problem`` (which everywhere else holds the error object) is its deprecated old name, kept
read-only for one release, and the library reads only the new one (issue 26)."""

from __future__ import annotations

import pickle
import warnings

import pytest

from jobcast.mlops.rest_app import _request_reason
from jobcast.service.engine.request import (
    INVALID_VALUE,
    UNKNOWN_COLUMN,
    JobRequestError,
    read_jobs_rows,
    requests_from_rows,
)


def _bad_rows() -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library itself never reads the old name
        return requests_from_rows([{"network": "resnet50", "batch_size": 32, "colour": "red"},
                                   {"network": "resnet50", "batch_size": -1}])


def test_a_request_error_says_its_refusal_in_a_word_and_the_rest_server_reads_it():
    bad_column, bad_value = _bad_rows()
    assert bad_column.refusal == UNKNOWN_COLUMN and bad_value.refusal == INVALID_VALUE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _request_reason(bad_column) == "unknown_column"
        assert _request_reason(bad_value) == "invalid_row"
    assert _request_reason(ValueError("unknown column 'x'")) == "unknown_column"


def test_a_csv_header_with_an_unknown_column_is_refused_as_such(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("network,deployment,batch_size,iterations,colour\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(JobRequestError) as caught:
            read_jobs_rows(path)
    assert caught.value.refusal == UNKNOWN_COLUMN


def test_the_old_name_problem_still_reads_warns_and_is_read_only():
    error = JobRequestError("bad", field="colour", refusal=UNKNOWN_COLUMN)
    with pytest.warns(DeprecationWarning, match=r"JobRequestError\.refusal"):
        assert error.problem == UNKNOWN_COLUMN
    with pytest.raises(AttributeError):
        error.problem = INVALID_VALUE  # type: ignore[misc]
    assert error.refusal == UNKNOWN_COLUMN


def test_the_old_keyword_problem_still_sets_the_refusal_and_warns():
    with pytest.warns(DeprecationWarning, match=r"refusal=\.\.\."):
        error = JobRequestError("bad", problem=UNKNOWN_COLUMN)
    assert error.refusal == UNKNOWN_COLUMN
    assert JobRequestError("bad").refusal == INVALID_VALUE


def test_a_request_error_keeps_its_refusal_through_pickle():
    error = JobRequestError("bad", field="colour", row=3, refusal=UNKNOWN_COLUMN)
    again = pickle.loads(pickle.dumps(error))
    assert (again.refusal, again.field, again.row, str(again)) == (
        UNKNOWN_COLUMN, "colour", 3, "bad")
