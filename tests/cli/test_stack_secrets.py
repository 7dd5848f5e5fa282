"""The team stack end to end, with least privilege and no secrets in sight (issues 27 and
38), on real servers: ``jobcast stack up --mlflow-auth`` runs a real private PostgreSQL with
its writer and reader roles and the real MLflow tracking server with its basic-auth app, on
127.0.0.1. One stack serves the whole module (started once; the last test stops it).

- the first ``up`` runs the store and the tracking server, not yet the forecast server, and
  prints no password; the reader role (what ``serve`` connects as) cannot write;
- the one end-to-end chain: ingest (``--store``) -> fit and register as the writer (``source
  D/env``, against the authenticated tracking server, which keeps its runs in PostgreSQL
  and its artifacts in ``D/artifacts``) -> the reader predicts and may not ingest -> a
  second ``up`` starts the forecast server as the reader -> it answers as the local
  forecast does -> its log;
- the tracking server answers 401 without credentials, 200 with them, 403 to the reader's
  write;
- a secret scan of the process table, every file the stack wrote (but the 0600 secret files)
  and the output of ``stack up``/``status``/``logs`` finds none of the generated secrets;
- a group-readable secret file is refused with a clear message;
- ``stack down`` stops every piece and frees every port.

Subprocesses only where a process boundary is checked: ``stack up`` (the servers it leaves
running, the forecast server's environment) and ``fit``/``register`` (MLflow's
process-wide tracking state); the other commands run in this process (``stack_support.cli``).
Without Flask-WTF (``mlflow[auth]``) the stack runs without MLflow auth and the MLflow auth
checks skip; the store's roles are checked either way.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shlex
import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from paths import DATA
from pg_server import free_port
from stack_support import cli, run_jobcast, stack_env, stack_folder

from fleet.credentials import SecretFileError, hide_password, read_secret, write_secret

pytestmark = pytest.mark.slow

AUTH = importlib.util.find_spec("flask_wtf") is not None
JOB = {"network": "resnet50", "deployment": "nvidia-a100-sxm4-40gb-x8", "batch_size": 2048,
       "iterations": 20000}
JOB_FLAGS = [x for k, v in JOB.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def _env_file(path: Path) -> dict[str, str]:
    """The variables an env file of the stack exports."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        out[key] = shlex.split(value)[0]
    return out


def _pieces(status: dict) -> dict[str, dict]:
    return {p["name"]: p for p in status["pieces"]}


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ok(result) -> dict | list:
    """The JSON a command run in this process printed, once it succeeded."""
    assert result.exit_code == 0, result.output[-3000:]
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def stack():
    """A running stack (PostgreSQL + tracking server, auth on when Flask-WTF is there)."""
    folder = stack_folder("jobcast-stack-sec-")
    env = stack_env()
    args = ["--dir", str(folder)]
    ports = {"pg": free_port(), "mlflow": free_port(), "serve": free_port()}
    try:
        up = run_jobcast("stack", "up", *args, "--pg-port", str(ports["pg"]), "--mlflow-port",
                         str(ports["mlflow"]), "--serve-port", str(ports["serve"]),
                         "--mlflow-auth" if AUTH else "--no-mlflow-auth", "--json", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        yield {"folder": folder, "env": env, "args": args, "up": up, "ports": ports}
    finally:
        cli("stack", "down", *args, "--json")  # a no-op once the last test stopped it
        shutil.rmtree(folder, ignore_errors=True)


def test_the_first_up_runs_the_store_and_the_tracking_server(stack):
    first = _pieces(json.loads(stack["up"].stdout))
    assert first["postgres"]["running"] and first["mlflow"]["running"]
    assert "***" in first["postgres"]["url"]  # the password is not printed
    assert not first["forecast"]["running"]
    assert "jobcast register" in first["forecast"]["note"]
    urls = _env_file(stack["folder"] / "env")
    assert urls["JOBCAST_STORE"].startswith("postgresql+psycopg://jobcast_writer:")
    assert urls["MLFLOW_TRACKING_URI"] == first["mlflow"]["url"]
    assert ("MLFLOW_TRACKING_PASSWORD" in urls) == AUTH


def test_the_reader_role_serve_connects_as_cannot_write(stack):
    import psycopg
    import sqlalchemy as sa

    from ingest.store import Store
    from jobcast.cli.stack import _config, forecast_env

    folder = stack["folder"]
    served = forecast_env(folder, _config(folder))  # what `stack up` starts `serve` with
    url = served["JOBCAST_STORE"]
    assert "jobcast_reader:" in url and url == _env_file(folder / "reader.env")["JOBCAST_STORE"]
    Store(url).engine.dispose()  # the reader opens a current store (reads only)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM files")).scalar_one() >= 0
        for statement in ("INSERT INTO files (source, content_hash) VALUES ('x', 'y')",
                          "DROP TABLE segments", "CREATE TABLE intruder (x int)",
                          "CREATE TEMP TABLE intruder (x int)"):
            with pytest.raises(sa.exc.ProgrammingError) as refused, engine.begin() as conn:
                conn.execute(sa.text(statement))
            assert isinstance(refused.value.orig, psycopg.errors.InsufficientPrivilege), statement
        with pytest.raises(sa.exc.OperationalError, match="permission denied"):
            sa.create_engine(url.rsplit("/", 1)[0] + "/mlflow").connect()  # MLflow's database
    finally:
        engine.dispose()


def _mlflow_runs_in_postgres(folder: Path, port: int) -> int:
    """Rows of MLflow's ``runs`` table in the stack's ``mlflow`` database (the superuser's:
    the store's roles may not connect to it)."""
    import sqlalchemy as sa

    from jobcast.cli.postgres import LocalPostgres

    engine = sa.create_engine(LocalPostgres(folder, port).url("mlflow"))
    with engine.connect() as conn:
        count = conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one()
    engine.dispose()
    return int(count)


def _served(url: str, job: dict) -> dict:
    """The forecast server's answer to one job row."""
    request = urllib.request.Request(
        f"{url}/invocations", headers={"Content-Type": "application/json"},
        data=json.dumps({"dataframe_records": [job]}).encode())
    with urllib.request.urlopen(request, timeout=120) as resp:
        [served] = json.load(resp)["predictions"]
    return served


def test_the_writer_ingests_fits_registers_the_reader_predicts_and_serves(stack):
    folder, base = stack["folder"], stack["env"]
    writer, reader = _env_file(folder / "env"), _env_file(folder / "reader.env")
    ingested = _ok(cli("ingest", str(DATA / "mlperf"), "--store", writer["JOBCAST_STORE"],
                       "--json"))
    assert ingested["added"] and not ingested["rejected"]
    fitted = run_jobcast("fit", "--json", env={**base, **writer})  # to the (authenticated) server
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    assert any(str(m.get("model") or m.get("model_id", "")).startswith("e2e/")
               for m in json.loads(fitted.stdout))
    refused = cli("ingest", str(DATA / "keras"), env=reader)  # the reader may not write
    assert refused.exit_code == 2 and not isinstance(refused.exception, Exception), \
        refused.output[-3000:]
    assert "Traceback" not in refused.output
    assert "the store refused to write" in refused.output and "source D/env" in refused.output
    registered = run_jobcast("register", "--no-scale-calibration", "--json",
                             env={**base, **writer})
    assert registered.returncode == 0, registered.stderr[-3000:]
    registered = json.loads(registered.stdout)
    assert registered["promoted"] and registered["version"] == "1"
    # the tracking server keeps its runs in PostgreSQL and its artifacts in D/artifacts
    assert _mlflow_runs_in_postgres(folder, stack["ports"]["pg"]) >= 2
    assert any(p.is_file() for p in (folder / "artifacts").rglob("*"))
    # a second `up` starts the forecast server: as the reader, on the store and the server
    up = run_jobcast("stack", "up", *stack["args"], "--json", env=base)
    assert up.returncode == 0, up.stderr[-3000:]
    second = _pieces(json.loads(up.stdout))
    assert all(p["running"] for p in second.values()), second
    forecast = second["forecast"]
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{forecast['pid']}/environ")
                   .read_bytes().decode().split("\0") if "=" in item)
    assert environ["JOBCAST_STORE"] == reader["JOBCAST_STORE"]
    assert environ.get("MLFLOW_TRACKING_USERNAME") == reader.get("MLFLOW_TRACKING_USERNAME")
    served = _served(forecast["url"], {**JOB, "phase": "train"})
    assert served["error"] is None
    assert 0 < served["low"] <= served["seconds"] <= served["high"]
    # the same models answer: those fitted into the PostgreSQL store (the local forecast
    # may add calibration the registered version was built without)
    local = _ok(cli("predict", *JOB_FLAGS, "--json", env=reader))
    assert served["model"] == local["model"]
    assert served["seconds"] == pytest.approx(local["seconds"], rel=0.05)
    logs = cli("stack", "logs", *stack["args"], "--service", "forecast", "-n", "5")
    assert logs.exit_code == 0 and "forecast" in logs.stdout


def _get(url: str, user: str | None = None, password: str | None = None,
         body: dict | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if user:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers=headers, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.skipif(not AUTH, reason="MLflow's basic-auth app needs Flask-WTF (mlflow[auth])")
def test_the_tracking_server_asks_who_is_there(stack):
    folder = stack["folder"]
    writer, reader = _env_file(folder / "env"), _env_file(folder / "reader.env")
    tracking = writer["MLFLOW_TRACKING_URI"]
    search = f"{tracking}/api/2.0/mlflow/experiments/search?max_results=5"
    assert _get(f"{tracking}/health") == 200
    assert _get(search) == 401
    assert _get(search, writer["MLFLOW_TRACKING_USERNAME"], "not-the-password-1") == 401
    assert _get(search, writer["MLFLOW_TRACKING_USERNAME"],
                writer["MLFLOW_TRACKING_PASSWORD"]) == 200
    assert _get(search, reader["MLFLOW_TRACKING_USERNAME"],
                reader["MLFLOW_TRACKING_PASSWORD"]) == 200
    # the reader may not make a user (admin only)
    assert _get(f"{tracking}/api/2.0/mlflow/users/create", reader["MLFLOW_TRACKING_USERNAME"],
                reader["MLFLOW_TRACKING_PASSWORD"],
                {"username": "mallory", "password": "a-long-password-1"}) == 403


def _secrets(folder: Path) -> dict[str, str]:
    """Every generated secret: the password/key files and the values the env files hold."""
    from jobcast.cli.stack_secrets import secret_files

    found = {}
    for path in secret_files(folder):
        if path.name.endswith("env"):
            for key, value in _env_file(path).items():
                if key == "MLFLOW_TRACKING_PASSWORD":
                    found[f"{path.name}:{key}"] = value
                elif key == "JOBCAST_STORE":
                    found[f"{path.name}:{key}"] = value.split(":", 2)[2].split("@")[0]
        else:
            found[path.name] = read_secret(path)
    return found


def _places(folder: Path, skip: set[Path]) -> tuple[dict[str, bytes], int]:
    """What the scan reads: every process's command line and every file in ``folder`` but
    those of ``skip``; and how many files that is."""
    places: dict[str, bytes] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                places[f"ps:{proc.name}"] = (proc / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
    scanned_files = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.resolve() not in skip:
            try:
                places[str(path)] = path.read_bytes()
                scanned_files += 1
            except OSError:
                continue  # a PostgreSQL temp file removed meanwhile
    return places, scanned_files


def test_no_secret_in_the_process_table_files_status_or_logs(stack):
    from jobcast.cli.stack_secrets import secret_files

    folder = stack["folder"]
    secrets = _secrets(folder)
    assert len(secrets) >= (8 if AUTH else 5)
    assert all(len(s) >= 20 for s in secrets.values())
    skip = {p.resolve() for p in secret_files(folder)}
    for path in skip:
        assert path.stat().st_mode & 0o777 == 0o600, path
    # the scan finds a secret where it is: each one is in a secret file
    assert all(any(s.encode() in p.read_bytes() for p in skip) for s in secrets.values())
    places, scanned_files = _places(folder, skip)
    for args in (("status",), ("status", "--json"), ("logs", "-n", "200")):
        done = cli("stack", *args, *stack["args"])
        assert done.exit_code == 0, done.output[-2000:]
        places[f"stack {' '.join(args)}"] = done.output.encode()
    places["stack up --json"] = (stack["up"].stdout + stack["up"].stderr).encode()
    hits = [(name, where) for name, secret in secrets.items()
            for where, data in places.items() if secret.encode() in data]
    print(f"secret scan: {len(secrets)} secrets, {sum(k.startswith('ps:') for k in places)} "
          f"processes, {scanned_files} files, {len(hits)} hits")
    assert scanned_files > 50 and any(k.startswith("ps:") for k in places)
    assert hits == []


def test_a_group_readable_secret_file_is_refused(stack):
    folder = stack["folder"]
    secret = folder / "pg-reader.password"
    secret.chmod(0o640)
    try:
        done = cli("stack", "status", *stack["args"])
    finally:
        secret.chmod(0o600)
    assert done.exit_code != 0
    assert str(secret) in done.output and "chmod 600" in done.output
    assert not isinstance(done.exception, Exception) and "Traceback" not in done.output
    assert cli("stack", "status", *stack["args"]).exit_code == 0


def test_down_stops_every_piece_and_frees_its_port(stack):
    down = _ok(cli("stack", "down", *stack["args"], "--json"))
    assert not any(p["running"] for p in down["pieces"])
    assert not any(_listening(p) for p in stack["ports"].values())


def test_secret_files_are_written_0600_and_refused_when_others_may_read(tmp_path):
    path = write_secret(tmp_path / "s.password", "hunter2-but-longer")
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_secret(path) == "hunter2-but-longer"
    for mode in (0o640, 0o604, 0o660):
        path.chmod(mode)
        with pytest.raises(SecretFileError, match=f"mode 0{mode:o}.*chmod 600"):
            read_secret(path)
    with pytest.raises(SecretFileError, match="missing"):
        read_secret(tmp_path / "absent")


def test_urls_are_shown_without_their_password():
    assert hide_password("postgresql+psycopg://w:s3cret@h:5432/db?sslmode=require") == \
        "postgresql+psycopg://w:***@h:5432/db?sslmode=require"
    assert hide_password("http://u:s3cret@h:5000") == "http://u:***@h:5000"
    assert hide_password("sqlite:///jobcast.db") == "sqlite:///jobcast.db"
    assert "s3cret" not in hide_password("not a url ://u:s3cret@h")
