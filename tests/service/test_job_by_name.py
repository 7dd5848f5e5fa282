"""A recurring job asked by its name (issue 35, causes 2 and 3, per-step history).

A real MLPerf system's description names its GPUs as a family ("NVIDIA A100", as several
submitters write it): its runs are stored under the family's key. Asked with the family, the
``nvidia-smi`` name of the part, or MLPerf's own part spelling, the forecaster answers from
the same own history; ``--job NAME`` alone takes network, GPUs, batch and length from the
job's newest run and says so.
"""

from __future__ import annotations

import json
import shutil

import pytest
from paths import SHARED_LOGS
from typer.testing import CliRunner

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.history import run_table

SYSTEM = "Dell/XE8545x4A100-SXM-40GB"
ROUND = SHARED_LOGS / "mlperf" / "v2.0" / "Dell"
runner = CliRunner()


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not ROUND.is_dir():
        pytest.skip("../shared/data is not beside the checkout")
    root = tmp_path_factory.mktemp("family") / "v2.0" / "Dell"
    name = SYSTEM.split("/")[1]
    results = root / "results" / name / "resnet"
    results.mkdir(parents=True)
    for i in range(3):
        shutil.copy(ROUND / "results" / name / "resnet" / f"result_{i}.txt", results)
    (root / "systems").mkdir()
    described = json.loads((ROUND / "systems" / f"{name}.json").read_text())
    described["accelerator_model_name"] = "NVIDIA A100"  # a description naming the family
    (root / "systems" / f"{name}.json").write_text(json.dumps(described))
    url = f"sqlite:///{root.parents[1]}/store.db"
    st = Store(url)
    assert not ingest_paths(st, [str(results)]).rejected
    assert {r.deployment for r in st.runs()} == {"nvidia-a100-x4"}
    return url


@pytest.mark.parametrize("spelled", ["4x A100", "4x NVIDIA A100-SXM4-40GB",
                                     "4x NVIDIA A100-SXM-40GB"])
def test_every_spelling_of_the_gpu_answers_from_the_systems_own_history(
        store_url: str, spelled: str) -> None:
    fc = Forecaster(Store(store_url))
    base = fc.forecast(JobRequest("resnet50", "4x A100", batch_size=_batch(store_url),
                                  iterations=3000, system=SYSTEM))
    found = fc.forecast(JobRequest("resnet50", spelled, batch_size=_batch(store_url),
                                   iterations=3000, system=SYSTEM))
    assert found.details["candidate"].startswith("own-"), found.details.get("why")
    assert found.seconds == pytest.approx(base.seconds, rel=1e-9)
    if spelled != "4x A100":  # a part asked, the family's history answered: it says so
        assert "its family" in found.details["deployment_match"]


def _batch(url: str) -> int:
    return next(iter(Store(url).runs())).batch_size


def test_job_alone_takes_its_history_and_says_so(store_url: str) -> None:
    res = runner.invoke(app, ["predict", "--job", SYSTEM, "--store", store_url, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["candidate"].startswith("own-")
    said = " ".join(out["assumptions"])
    assert "newest run" in said and "resnet50" in said and "nvidia-a100-x4" in said
    # --system is the same flag; a longer job takes longer
    res2 = runner.invoke(app, ["predict", "--system", SYSTEM, "--store", store_url, "--json"])
    assert json.loads(res2.output)["seconds"] == pytest.approx(out["seconds"])
    most = int(run_table(Store(store_url))["train_iterations"].max())
    longer = runner.invoke(app, ["predict", "--job", SYSTEM, "--store", store_url, "--json",
                                 "--iterations", str(2 * most)])
    assert json.loads(longer.output)["seconds"] > 1.5 * out["seconds"]


def test_unknown_job_lists_the_known_ones(store_url: str) -> None:
    res = runner.invoke(app, ["predict", "--job", "nightly-resnet", "--store", store_url])
    assert res.exit_code == 2
    assert "no run of job 'nightly-resnet'" in res.output and SYSTEM in res.output
