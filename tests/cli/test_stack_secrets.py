"""Least privilege and no secrets in sight in the team stack (issue 27), on real servers:
``jobcast stack up --mlflow-auth`` runs a real private PostgreSQL with its writer and reader
roles and the real MLflow tracking server with its basic-auth app, on 127.0.0.1.

- the reader role (what ``serve`` as the stack starts it connects as) cannot write;
- the writer ingests, fits and registers (against the authenticated tracking server), the
  reader predicts, and the forecast server the stack then starts runs as the reader;
- the tracking server answers 401 without credentials, 200 with them, 403 to the reader's write;
- a secret scan of the process table, every file the stack wrote (but the 0600 secret files)
  and the output of ``stack status``/``logs`` finds none of the generated secrets;
- a group-readable secret file is refused with a clear message.

Without Flask-WTF (``mlflow[auth]``) the stack runs without MLflow auth and the MLflow tests
skip; the store's roles are checked either way.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shlex
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from paths import DATA
from pg_server import free_port
from stack_support import run_jobcast, stack_env, stack_folder

from ingest.credentials import SecretFileError, hide_password, read_secret, write_secret

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


@pytest.fixture(scope="module")
def stack():
    """A running stack (PostgreSQL + tracking server, auth on when Flask-WTF is there)."""
    folder = stack_folder("jobcast-stack-sec-")
    env = stack_env()
    args = ["--dir", str(folder)]
    try:
        up = run_jobcast("stack", "up", *args, "--pg-port", str(free_port()), "--mlflow-port",
                      str(free_port()), "--serve-port", str(free_port()),
                      "--mlflow-auth" if AUTH else "--no-mlflow-auth", "--json", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        yield {"folder": folder, "env": env, "args": args, "up": up}
    finally:
        run_jobcast("stack", "down", *args, "--json", env=env, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


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


def test_the_writer_ingests_and_fits_the_reader_predicts(stack):
    folder, base = stack["folder"], stack["env"]
    writer = {**base, **_env_file(folder / "env")}
    reader = {**base, **_env_file(folder / "reader.env")}
    assert "jobcast_writer:" in writer["JOBCAST_STORE"]
    assert ("MLFLOW_TRACKING_PASSWORD" in writer) == AUTH
    ingested = run_jobcast("ingest", str(DATA / "mlperf"), "--json", env=writer)
    assert ingested.returncode == 0, ingested.stderr[-3000:]
    assert json.loads(ingested.stdout)["added"]
    fitted = run_jobcast("fit", "--json", env=writer)  # logs to the (authenticated) server
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    predicted = run_jobcast("predict", *JOB_FLAGS, "--json", env=reader)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    assert json.loads(predicted.stdout)["seconds"] > 0
    refused = run_jobcast("ingest", str(DATA / "keras"), env=reader)  # the reader may not write
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert "the store refused to write" in refused.stderr and "source D/env" in refused.stderr
    registered = run_jobcast("register", "--no-scale-calibration", "--json", env=writer)
    assert registered.returncode == 0, registered.stderr[-3000:]
    # a second `up` starts the forecast server: as the reader, on the store and the server
    up = run_jobcast("stack", "up", *stack["args"], "--json", env=base)
    assert up.returncode == 0, up.stderr[-3000:]
    forecast = {p["name"]: p for p in json.loads(up.stdout)["pieces"]}["forecast"]
    assert forecast["running"], forecast
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{forecast['pid']}/environ")
                   .read_bytes().decode().split("\0") if "=" in item)
    assert environ["JOBCAST_STORE"] == reader["JOBCAST_STORE"]
    assert environ.get("MLFLOW_TRACKING_USERNAME") == reader.get("MLFLOW_TRACKING_USERNAME")
    request = urllib.request.Request(
        f"{forecast['url']}/invocations", headers={"Content-Type": "application/json"},
        data=json.dumps({"dataframe_records": [JOB]}).encode())
    with urllib.request.urlopen(request, timeout=120) as resp:
        [served] = json.load(resp)["predictions"]
    assert served["error"] is None and served["seconds"] > 0


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


def test_no_secret_in_the_process_table_files_status_or_logs(stack):
    from jobcast.cli.stack_secrets import secret_files

    folder, env = stack["folder"], stack["env"]
    secrets = _secrets(folder)
    assert len(secrets) >= (8 if AUTH else 5)
    assert all(len(s) >= 20 for s in secrets.values())
    skip = {p.resolve() for p in secret_files(folder)}
    for path in skip:
        assert path.stat().st_mode & 0o777 == 0o600, path
    # the scan finds a secret where it is: each one is in a secret file
    assert all(any(s.encode() in p.read_bytes() for p in skip) for s in secrets.values())
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
    for args in (("status",), ("status", "--json"), ("logs", "-n", "200")):
        done = run_jobcast("stack", *args, *stack["args"], env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        places[f"stack {' '.join(args)}"] = (done.stdout + done.stderr).encode()
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
        done = run_jobcast("stack", "status", *stack["args"], env=stack["env"])
    finally:
        secret.chmod(0o600)
    assert done.returncode != 0
    assert str(secret) in done.stderr and "chmod 600" in done.stderr
    assert "Traceback" not in done.stderr
    assert run_jobcast("stack", "status", *stack["args"], env=stack["env"]).returncode == 0


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
