"""A renamed flag keeps its old spelling for one release (cli/options.py rules): the old
spelling works and warns on stderr, stdout stays clean, both spellings that differ fail."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from jobcast.cli.app import app as jobcast_app
from jobcast.cli.options import (
    RAY_ADDRESS,
    deprecated_alias,
    json_option,
    precision_option,
    ray_option,
)
from jobcast.cli.output import emit_json

runner = CliRunner()
toy = typer.Typer()


@toy.command()
def show(
    local_device: str | None = typer.Option(None, "--local-device"),
    device_old: str | None = typer.Option(None, "--device", hidden=True),
    precision: list[str] | None = precision_option(repeat=True),
    use_ray: bool = ray_option("Time"),
    ray_address: str | None = RAY_ADDRESS,
    as_json: bool = json_option(),
) -> None:
    """Print the merged device."""
    device = deprecated_alias(local_device, device_old, "--device", "--local-device",
                              default="cpu")
    emit_json({"device": device, "precision": precision, "ray": use_ray or bool(ray_address)})


def test_new_spelling_and_default_need_no_warning():
    result = runner.invoke(toy, ["--local-device", "gpu:1"])
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout)["device"] == "gpu:1"
    assert json.loads(runner.invoke(toy, []).stdout)["device"] == "cpu"


def test_old_spelling_still_works_and_warns_on_stderr():
    result = runner.invoke(toy, ["--device", "gpu", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["device"] == "gpu"  # stdout stays JSON
    assert "warning: --device is deprecated; use --local-device" in result.stderr


def test_both_spellings_agreeing_pass_and_differing_fail():
    same = runner.invoke(toy, ["--device", "gpu", "--local-device", "gpu"])
    assert same.exit_code == 0 and json.loads(same.stdout)["device"] == "gpu"
    both = runner.invoke(toy, ["--device", "gpu", "--local-device", "cpu", "--json"])
    assert both.exit_code == 2
    assert "--device is the old spelling of --local-device" in both.stderr
    assert json.loads(both.stdout)["error"]["kind"] == "usage"


def test_shared_precision_and_ray_options():
    result = runner.invoke(toy, ["--precision", "fp16", "--precision", "bf16",
                                 "--ray-address", "ray://h:1"])
    assert json.loads(result.stdout) == {"device": "cpu", "precision": ["fp16", "bf16"],
                                         "ray": True}
    help_text = runner.invoke(toy, ["--help"]).stdout
    assert "--device" not in help_text.replace("--local-device", "")  # the old one is hidden
    for flag in ("--precision", "--ray", "--ray-address"):
        assert flag in help_text


def test_predict_and_compare_share_one_precision_help():
    commands = typer.main.get_command(jobcast_app).commands  # read, not rendered: no widths
    helps = [next(p.help for p in commands[name].params if p.name == "precision")
             for name in ("predict", "compare")]
    for text in helps:
        assert text.startswith("Precision as set in the framework: fp32, tf32, fp16, bf16")
