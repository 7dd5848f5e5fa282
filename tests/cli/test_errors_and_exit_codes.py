"""Exit codes and the one JSON error shape (cli/output.py rules): 2 for a user error, with
``{"error": {...}}`` on stdout under ``--json``; 70 for a bug, one line, no traceback."""

from __future__ import annotations

import json

import pytest
from cli_main import run_main
from typer.testing import CliRunner

import jobcast.service.features.known as service_catalog
from jobcast.cli.app import app
from jobcast.cli.output import set_json_mode
from jobcast.service.errors import ServiceError

runner = CliRunner()
KEYS = {"kind", "message", "file", "line", "field", "row"}


@pytest.fixture(autouse=True)
def _plain_mode():
    yield
    set_json_mode(False)  # main() runs in this process: leave no JSON mode behind




def test_json_failure_prints_the_error_object_on_stdout(tmp_path):
    missing = f"sqlite:///{tmp_path / 'nowhere.db'}"
    result = runner.invoke(app, ["runs", "--store", missing, "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert set(error) == KEYS
    assert error["kind"] == "store" and "no store at" in error["message"]
    assert "error: no store at" in result.stderr
    plain = runner.invoke(app, ["runs", "--store", missing])
    assert plain.exit_code == 2 and plain.stdout == ""  # JSON only when asked for
    assert "error: no store at" in plain.stderr


def test_json_mode_does_not_leak_into_the_next_command(tmp_path):
    missing = f"sqlite:///{tmp_path / 'nowhere.db'}"
    runner.invoke(app, ["runs", "--store", missing, "--json"])
    later = runner.invoke(app, ["runs", "--store", missing])
    assert later.exit_code == 2 and later.stdout == ""


def test_a_bug_exits_70_with_one_line_and_no_traceback(monkeypatch, capsys):
    def broken(query):
        return 1 / 0

    monkeypatch.setattr(service_catalog, "find_gpus", broken)
    monkeypatch.delenv("JOBCAST_DEBUG", raising=False)
    code, out, err = run_main(monkeypatch, capsys, "gpus", "V100")
    assert code == 70
    assert err.strip() == ("error: internal error (a bug in jobcast, please report it): "
                           "ZeroDivisionError: division by zero")
    assert "Traceback" not in err and out == ""


def test_a_bug_under_json_prints_a_bug_error_object(monkeypatch, capsys):
    monkeypatch.setattr(service_catalog, "find_gpus", lambda query: 1 / 0)
    monkeypatch.delenv("JOBCAST_DEBUG", raising=False)
    code, out, err = run_main(monkeypatch, capsys, "gpus", "V100", "--json")
    assert code == 70
    error = json.loads(out)["error"]
    assert error["kind"] == "bug" and "ZeroDivisionError" in error["message"]
    assert "Traceback" not in err


def test_jobcast_debug_shows_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr(service_catalog, "find_gpus", lambda query: 1 / 0)
    monkeypatch.setenv("JOBCAST_DEBUG", "1")
    code, _, err = run_main(monkeypatch, capsys, "gpus", "V100")
    assert code == 70
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith(
        "error: internal error (a bug in jobcast")


def test_a_jobcast_error_reaching_main_is_a_user_error(monkeypatch, capsys):
    def refuses(query):
        raise ServiceError("the catalog is closed today")

    monkeypatch.setattr(service_catalog, "find_gpus", refuses)
    code, out, err = run_main(monkeypatch, capsys, "gpus", "V100", "--json")
    assert code == 2
    assert err.strip() == "error: the catalog is closed today"
    assert json.loads(out)["error"]["message"] == "the catalog is closed today"
    assert json.loads(out)["error"]["kind"] == ServiceError.kind
    code, out, err = run_main(monkeypatch, capsys, "gpus", "V100")
    assert code == 2 and out == "" and "Traceback" not in err


def test_success_and_partial_exit_codes_are_unchanged(monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, "gpus", "V100", "--json")
    assert code == 0 and json.loads(out)
    code, out, _ = run_main(monkeypatch, capsys, "gpus", "no-such-gpu-xyz", "--json")
    assert code == 1  # a query that matches nothing (catalog rules), now with its JSON error
    assert "no GPU in the catalog" in json.loads(out)["error"]["message"]


def test_a_bad_request_names_its_kind_and_field(tmp_path):
    env = {"JOBCAST_HOME": str(tmp_path / "home"), "JOBCAST_STORE": ""}
    result = runner.invoke(app, ["predict", "--network", "resnet50", "--device", "V100",
                                 "--batch-size", "32", "--iterations", "10", "--tag", "bad",
                                 "--json"], env=env)
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert (error["kind"], error["field"]) == ("request", "tags")
    assert "must be written key=value" in error["message"]
    assert "error: tags: tag 'bad'" in result.stderr
    assert not (tmp_path / "home").exists()


def test_ingest_flag_errors_answer_in_json_and_write_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'never.db'}"
    result = runner.invoke(app, ["ingest", str(tmp_path), "--store", url, "--override",
                                 "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["message"] == "--override needs --deployment" and error["field"] == "override"
    assert not (tmp_path / "never.db").exists()
