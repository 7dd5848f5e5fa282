"""A site's Slurm GRES types (``gres/gpu:a100_80=1``) resolve to catalog GPUs (issue 35).

The types are those a real 2025 university cluster's ``AllocTRES`` carries (``a100_80``,
``rtx30``, ``l40s``, ``a40``) and common scheduler spellings; what the catalog cannot decide
(``rtx30``: an RTX 30-series card) a site alias file maps.
"""

from __future__ import annotations

import json

import pytest
from slurm_shapes import document, history
from typer.testing import CliRunner

from fleet.catalog import UnknownGpuError
from fleet.deployment import Deployment
from fleet.site_aliases import ALIASES_ENV, SiteAliasError, load_aliases, resolve_site_gpu
from jobcast.cli.app import app

runner = CliRunner()
T0 = 1_714_000_000


@pytest.fixture(autouse=True)
def data_home(tmp_path, monkeypatch):
    """A data directory of this test's own, and no alias file named by the environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("JOBCAST_HOME", str(home))
    monkeypatch.delenv(ALIASES_ENV, raising=False)
    return home


def ingest_type(tmp_path, gpu_type: str, gpus: int = 2) -> dict:
    jobs = history("train", [{"start": T0, "seconds": 1700, "gpu_type": gpu_type,
                              "gpus": gpus}])
    (tmp_path / "s.json").write_text(document(jobs, "new"))
    url = f"sqlite:///{tmp_path / 's.db'}"
    result = runner.invoke(app, ["ingest", str(tmp_path / "s.json"), "--store", url, "--json"],
                           catch_exceptions=False)
    report = json.loads(result.stdout)
    runs = json.loads(runner.invoke(app, ["runs", "--store", url, "--json"]).stdout)
    return report | {"runs": runs}


@pytest.mark.parametrize("gpu_type, catalog_name", [
    ("a100", "A100 SXM4 40GB"), ("a100_80", "A100 SXM4 80GB"),
    ("a100-sxm4-80gb", "A100 SXM4 80GB"), ("h100_80gb", "H100 SXM5"), ("l40s", "L40S"),
    ("a40", "A40"), ("rtx_3090", "GeForce RTX 3090"), ("v100_32", "Tesla V100 SXM2 32GB"),
])
def test_common_scheduler_spellings_resolve(tmp_path, gpu_type, catalog_name):
    report = ingest_type(tmp_path, gpu_type)
    (run,) = report["runs"]
    assert run["deployment"] == Deployment(catalog_name, 2, 1).key
    assert run["meta"]["whole_job"]["gpu_type"] == gpu_type and not report["warnings"]


def test_an_ambiguous_type_is_stored_as_named_with_how_to_map_it(tmp_path, data_home):
    report = ingest_type(tmp_path, "rtx30")
    (run,) = report["runs"]
    assert run["deployment"] == Deployment("rtx30", 2, 1).key
    (warning,) = [w["warning"] for w in report["warnings"]]
    assert "'rtx30' is not resolved (ambiguous: it begins the names of" in warning
    assert "GeForce RTX 3090" in warning
    assert f"'rtx30 = <catalog GPU name>' in ${ALIASES_ENV} or {data_home}" in warning


def test_an_unknown_type_is_stored_from_its_count_with_how_to_map_it(tmp_path):
    report = ingest_type(tmp_path, "zz9", gpus=4)
    (run,) = report["runs"]
    assert run["deployment"] == Deployment("zz9", 4, 1).key
    assert "map it with a line 'zz9 = <catalog GPU name>'" in report["warnings"][0]["warning"]


@pytest.mark.parametrize("where", ["env", "data home"])
def test_the_site_alias_file_maps_the_rest(tmp_path, monkeypatch, data_home, where):
    path = tmp_path / "aliases.txt" if where == "env" else data_home / "gpu_aliases.txt"
    path.write_text("# our GRES types\n\nrtx30 = GeForce RTX 3090   # the 3090 nodes\n"
                    "A100L = A100 80GB\n")
    if where == "env":
        monkeypatch.setenv(ALIASES_ENV, str(path))
    report = ingest_type(tmp_path, "rtx30")
    assert report["runs"][0]["deployment"] == Deployment("GeForce RTX 3090", 2, 1).key
    assert not report["warnings"]
    assert resolve_site_gpu("a100l", data_home).name == "A100 SXM4 80GB"
    assert load_aliases(path) == {"rtx30": "GeForce RTX 3090", "a100l": "A100 SXM4 80GB"}


@pytest.mark.parametrize("text, reason", [
    ("rtx30 GeForce RTX 3090\n", ":1: want 'alias = catalog GPU name'"),
    ("# ok\nrtx30 = RTX 9999\n", ":2: 'rtx30' maps to unknown GPU 'RTX 9999'"),
    ("x = A40\nX = L40S\n", ":2: 'X' maps to L40S, but line 1 maps 'x' to A40"),
])
def test_a_bad_alias_line_is_named_by_file_and_line(tmp_path, monkeypatch, text, reason):
    path = tmp_path / "aliases.txt"
    path.write_text(text)
    monkeypatch.setenv(ALIASES_ENV, str(path))
    with pytest.raises(SiteAliasError, match=reason.replace("(", r"\(")):
        load_aliases(path)
    report = ingest_type(tmp_path, "rtx30")
    (err,) = report["rejected"]
    assert f"{path}{reason}" in err["reason"] and not report["runs"]


def test_a_type_no_rule_resolves_keeps_the_catalogs_suggestions():
    with pytest.raises(UnknownGpuError, match="Did you mean"):
        resolve_site_gpu("a100_81")
