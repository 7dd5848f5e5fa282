"""The options the commands share (jobcast/cli/options.py): one definition, the same everywhere,
and openers that turn bad values into ``error: ...`` and exit code 2."""

from __future__ import annotations

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from jobcast.cli.app import app
from jobcast.cli.options import STORE_HELP, metric_names, open_prometheus, open_store

runner = CliRunner()


def _commands(group=None, prefix: str = "") -> dict:
    """Every leaf command of the app by its full name."""
    group = group or get_command(app)
    found = {}
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found.update(_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


def _option(command, flag: str):
    return next((p for p in command.params if flag in getattr(p, "opts", ())), None)


def test_shared_options_read_the_same_in_every_command():
    commands = _commands()
    stores = {n: _option(c, "--store") for n, c in commands.items() if _option(c, "--store")}
    assert {"ingest", "runs", "fit", "predict", "compare", "report", "register",
            "ingest-prometheus", "eta", "serve"} <= stores.keys()
    assert {n for n, p in stores.items() if p.help != STORE_HELP} == set()  # serve too
    trackings = {_option(c, "--tracking-uri").help for c in commands.values()
                 if _option(c, "--tracking-uri")}
    assert len(trackings) == 1
    for name, command in commands.items():
        flag = _option(command, "--json")
        if flag is not None:
            assert flag.default is False and flag.is_flag, name
            assert flag.help.startswith("Print"), name


def test_open_store_fails_with_exit_2(capsys):
    with pytest.raises(typer.Exit) as caught:
        open_store("nosuchdialect://nowhere")
    assert caught.value.exit_code == 2
    assert "cannot open store nosuchdialect://nowhere" in capsys.readouterr().err


def test_bad_store_url_on_the_command_line():
    result = runner.invoke(app, ["runs", "--store", "nosuchdialect://nowhere"])
    assert result.exit_code == 2 and "cannot open store" in result.output


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"basic_auth": "no-colon"}, "--basic-auth must be USER:PASSWORD"),
        ({"basic_auth": ":secret"}, "--basic-auth must be USER:PASSWORD"),
        ({"ca_file": "/no/such/ca.pem"}, "--ca-file /no/such/ca.pem: no such file"),
    ],
)
def test_open_prometheus_refuses_bad_credentials(capsys, extra, message):
    settings = {"timeout": 1.0, "retries": 0, "bearer_token": None, "basic_auth": None,
                "ca_file": None, "insecure": False, **extra}
    with pytest.raises(typer.Exit) as caught:
        open_prometheus("http://127.0.0.1:9", **settings)
    assert caught.value.exit_code == 2
    assert message in capsys.readouterr().err


def test_open_prometheus_and_metric_names_accept_good_values():
    client = open_prometheus("http://127.0.0.1:9", timeout=1.0, retries=0, bearer_token="t",
                             basic_auth="user:pw", ca_file=None, insecure=False)
    client.close()
    names = metric_names("jobcast", "job_id", "network", "deployment")
    assert names.job_label == "job_id"


def test_prometheus_commands_refuse_bad_basic_auth_before_connecting():
    for command in (["ingest-prometheus"], ["eta", "--job-id", "j1"]):
        result = runner.invoke(app, [*command, "--url", "http://127.0.0.1:9",
                                     "--basic-auth", "nouser"])
        assert result.exit_code == 2, result.output
        assert "--basic-auth must be USER:PASSWORD" in result.output


def test_precision_and_ray_are_one_definition_each():
    commands = _commands()
    precisions = {n: _option(c, "--precision").help for n, c in commands.items()
                  if _option(c, "--precision")}
    assert {"predict", "compare"} <= precisions.keys()
    assert all(h.startswith("Precision as set in the framework: fp32, tf32, fp16, bf16")
               for h in precisions.values()), precisions
    rays = {n: _option(c, "--ray-address").help for n, c in commands.items()
            if _option(c, "--ray-address")}
    assert "ingest" in rays and len(set(rays.values())) == 1
    assert all(_option(commands[n], "--ray").help.endswith(
        "in Ray tasks (local Ray unless --ray-address); one writer.") for n in rays)
