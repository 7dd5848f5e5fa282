"""``jobcast stack up|down|status|logs``: the team stack on one machine, in one folder.

Pieces (``--dir D``, default ``./jobcast-stack``):

- ``postgres``: a private PostgreSQL (:mod:`jobcast.cli.postgres`) in ``D/pgdata``, created on
  first use, on 127.0.0.1 only, with two databases: ``jobcast`` (the store) and ``mlflow``
  (the tracking server's runs and model registry; separate because both use tables named
  ``runs``).
- ``mlflow``: ``mlflow server`` on the ``mlflow`` database, artifacts in ``D/artifacts`` (or
  ``--artifacts-destination``, e.g. ``s3://bucket/path``), proxied by the server.
- ``forecast``: ``jobcast serve`` of the registered forecaster's alias; started only once a
  version holds the alias (``jobcast fit && jobcast register`` against the stack first), so a
  second ``up`` starts it. To serve a newly promoted version: ``down --service forecast``
  then ``up``.

Rules: ``up`` starts what is not running and is safe to repeat; ports and options given to
``up`` are kept in ``D/stack.json`` for later calls. Each process runs in its own session,
its PID in ``D/run/<piece>.pid`` and its output in ``D/logs/<piece>.log``; ``down`` stops
the process group (SIGTERM, then SIGKILL after 30 s). The store is created (by the writer
role) at the newest schema revision on first ``up``; an older store is reported (run
``jobcast store upgrade``), never migrated here.

Least privilege and secrets (:mod:`jobcast.cli.stack_secrets`): ``D/env`` (mode 0600) exports
``JOBCAST_STORE`` as the store's writer role and ``MLFLOW_TRACKING_URI`` (plus the tracking
server's admin login when its basic auth is on): ``source D/env`` to ingest, fit, register.
``D/reader.env`` exports the same as the read-only role (and the tracking server's read-only
user): for predict, report and serve; the forecast server the stack starts gets it. The
tracking server runs MLflow's basic-auth app when ``--mlflow-auth`` is given or ``--host``
is beyond loopback. Secrets travel in environments and 0600 files only, never on a command
line; printed URLs hide the password; a group- or world-readable secret file is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.text import Text

from fleet.credentials import SecretFileError, check_secret_file, hide_password
from jobcast.cli import stack_secrets as sec
from jobcast.cli.options import json_option
from jobcast.cli.output import console, emit_json, fail, note

PIECES = ("postgres", "mlflow", "forecast")
DEFAULTS = {"pg_port": 5433, "mlflow_port": 5000, "serve_port": 5001, "host": "127.0.0.1",
            "artifacts_destination": None, "name": "jobcast-forecaster", "alias": "champion",
            "mlflow_auth": None}
STORE_DB, MLFLOW_DB = "jobcast", "mlflow"

stack_app = typer.Typer(
    help="Run the team stack on this machine: PostgreSQL, the MLflow tracking server and "
         "the forecast server, in one folder.",
    no_args_is_help=True,
)
DIR = typer.Option(Path("jobcast-stack"), "--dir", help="The stack's folder (data, logs, PIDs).")


def register(app: typer.Typer) -> None:
    """Add the ``stack`` sub-command group to ``app``."""
    app.add_typer(stack_app, name="stack")


# -- the folder's state ----------------------------------------------------------------------


def _config(folder: Path, save: bool = False, **given) -> dict:
    """The stack's settings: defaults, then ``stack.json``, then the options given (not
    None); ``save`` writes the result back."""
    path = folder / "stack.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        fail(f"{path}: unreadable stack settings ({exc}); fix or delete it")
    config = {**DEFAULTS, **saved, **{k: v for k, v in given.items() if v is not None}}
    if save:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return config


def _postgres(folder: Path, config: dict):
    from jobcast.cli.postgres import LocalPostgres

    return LocalPostgres(folder, int(config["pg_port"]))


def _tracking_uri(config: dict) -> str:
    host = "127.0.0.1" if config["host"] in ("0.0.0.0", "::") else config["host"]
    return f"http://{host}:{config['mlflow_port']}"


def _serve_url(config: dict) -> str:
    host = "127.0.0.1" if config["host"] in ("0.0.0.0", "::") else config["host"]
    return f"http://{host}:{config['serve_port']}"


def _pid_file(folder: Path, piece: str) -> Path:
    return folder / "run" / f"{piece}.pid"


def _log(folder: Path, piece: str) -> Path:
    return folder / "logs" / f"{piece}.log"


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that has exited: reap it
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _running_pid(folder: Path, piece: str) -> int | None:
    try:
        pid = int(_pid_file(folder, piece).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _answers(url: str) -> bool:
    import urllib.request  # here: every other command starts without it

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


# -- starting and stopping -------------------------------------------------------------------


def _spawn(folder: Path, piece: str, argv: list[str], env: dict[str, str]) -> int:
    log = _log(folder, piece)
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(folder, piece).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=folder,
                                start_new_session=True)
    _pid_file(folder, piece).write_text(f"{proc.pid}\n", encoding="utf-8")
    return proc.pid


def _wait_until(url: str, pid: int, piece: str, folder: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _answers(url):
            return
        if not _alive(pid):
            tail = _tail(_log(folder, piece), 15)
            fail(f"{piece} exited before answering on {url}; the end of its log "
                 f"({_log(folder, piece)}):\n{tail}")
        time.sleep(0.5)
    fail(f"{piece} did not answer on {url} within {timeout:.0f} s; see {_log(folder, piece)}")


def _stop_group(folder: Path, piece: str) -> bool:
    """Stop a piece's process group; returns whether something was running."""
    pid = _running_pid(folder, piece)
    _pid_file(folder, piece).unlink(missing_ok=True)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    # children the leader left behind (e.g. uvicorn workers) share its group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID"):
        env.pop(key, None)
    return env


def _write_env(folder: Path, config: dict) -> None:
    pg = _postgres(folder, config)
    urls = {kind: pg.url(STORE_DB, role=kind) for kind in ("writer", "reader")}
    sec.write_env_files(folder, config, urls, _tracking_uri(config))


def forecast_env(folder: Path, config: dict) -> dict[str, str]:
    """The forecast server's environment: the store and the tracking server as the reader."""
    pg = _postgres(folder, config)
    return {**_child_env(), **sec.client_env(folder, config, "reader",
                                             pg.url(STORE_DB, role="reader"),
                                             _tracking_uri(config))}


def _start_postgres(folder: Path, config: dict) -> str | None:
    """Start PostgreSQL and make both databases; returns a note on the store's schema."""
    import psycopg

    from jobcast.cli.postgres import PostgresUnavailable
    from jobcast.service.features.stores import SchemaVersionError, Store

    pg = _postgres(folder, config)
    try:
        pg.start()
        for name in (STORE_DB, MLFLOW_DB):
            pg.create_database(name)
        pg.ensure_roles(STORE_DB, private=(MLFLOW_DB,))
    except PostgresUnavailable as exc:
        fail(str(exc))
    except psycopg.Error as exc:
        fail(f"PostgreSQL on 127.0.0.1:{pg.port} refused to set up the store's roles: "
             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    try:  # an empty store is created (by the writer) at the newest revision
        Store(pg.url(STORE_DB, role="writer")).engine.dispose()
    except SchemaVersionError as exc:
        return str(exc)
    return None


def _start_mlflow(folder: Path, config: dict) -> None:
    if _running_pid(folder, "mlflow") is not None:
        return
    pg = _postgres(folder, config)
    destination = config["artifacts_destination"] or str((folder / "artifacts").resolve())
    env = _child_env()
    env["MLFLOW_BACKEND_STORE_URI"] = pg.url(MLFLOW_DB)  # in the environment, not in `ps`
    argv = [sys.executable, "-m", "mlflow", "server", "--artifacts-destination", destination,
            "--host", config["host"], "--port", str(config["mlflow_port"]), "--workers", "1"]
    if sec.auth_on(config):
        env, extra = sec.mlflow_server_env(folder, env)
        argv += extra
    pid = _spawn(folder, "mlflow", argv, env)
    _wait_until(f"{_tracking_uri(config)}/health", pid, "mlflow", folder, timeout=180)


def _start_forecast(folder: Path, config: dict) -> str | None:
    """Start the forecast server if a version holds the alias; else say why not."""
    if _running_pid(folder, "forecast") is not None:
        return None
    from jobcast.mlops.registry import RegistryError, resolve_model_uri

    tracking = _tracking_uri(config)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    env = forecast_env(folder, config)
    try:
        with sec.environ({k: v for k, v in env.items() if k.startswith("MLFLOW_TRACKING_")}):
            resolve_model_uri(config["name"], config["alias"], None, tracking)
    except RegistryError:
        return (f"not started: no version of {config['name']!r} holds alias "
                f"{config['alias']!r} yet; run `jobcast fit` and `jobcast register` with "
                f"--tracking-uri {tracking}, then `jobcast stack up` again")
    argv = [sys.executable, "-m", "jobcast", "serve", "--port", str(config["serve_port"]),
            "--host", config["host"], "--tracking-uri", tracking, "--name", config["name"],
            "--alias", config["alias"], "--tokens", str(sec.serve_tokens(folder, config))]
    pid = _spawn(folder, "forecast", argv, env)
    _wait_until(f"{_serve_url(config)}/ping", pid, "forecast", folder, timeout=240)
    return None


# -- status ----------------------------------------------------------------------------------


def _status(folder: Path, notes: dict[str, str] | None = None) -> dict:
    for path in sec.secret_files(folder):  # refused when others may read them
        check_secret_file(path)
    config = _config(folder)
    notes = notes or {}
    pg = _postgres(folder, config)
    pieces = []
    pg_running = pg.initialised() and pg.running()
    roles = pg.role_password_file("writer").exists()
    pg_url = (hide_password(pg.url(STORE_DB, role="writer" if roles else None))
              if pg.initialised() else None)
    pieces.append({"name": "postgres", "running": pg_running,
                   "pid": pg.pid() if pg_running else None, "url": pg_url,
                   "log": str(pg.log), "note": notes.get("postgres", "")})
    for piece, url, probe in (("mlflow", _tracking_uri(config), "/health"),
                              ("forecast", _serve_url(config), "/ping")):
        pid = _running_pid(folder, piece)
        running = pid is not None and _answers(url + probe)
        pieces.append({"name": piece, "running": running, "pid": pid, "url": url,
                       "log": str(_log(folder, piece)), "note": notes.get(piece, "")})
    return {"dir": str(folder.resolve()), "env": str((folder / "env").resolve()),
            "reader_env": str((folder / "reader.env").resolve()),
            "mlflow_auth": sec.auth_on(config), "pieces": pieces}


def _print_status(status: dict) -> None:
    """The status table and notes; paths, URLs and notes are text, never Rich markup."""
    from rich.table import Table

    table = Table("piece", "state", "pid", "url", "log")
    for p in status["pieces"]:
        state = Text("running", "green") if p["running"] else Text("stopped", "red")
        table.add_row(Text(p["name"]), state, str(p["pid"] or ""), Text(p["url"] or ""),
                      Text(p["log"]))
    console.print(table)
    for p in status["pieces"]:
        if p["note"]:
            console.print(Text.assemble((p["name"], "yellow"), ": ", p["note"]), soft_wrap=True)
    note("", f"environment for ingest, fit, register: source {status['env']}")
    note("", f"environment for predict, report, serve (read-only): source "
             f"{status['reader_env']}")


def _tail(path: Path, lines: int) -> str:
    if not path.is_file():
        return "(no log yet)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 200 * lines))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _pieces(service: list[str] | None) -> list[str]:
    chosen = service or list(PIECES)
    unknown = [s for s in chosen if s not in PIECES]
    if unknown:
        fail(f"--service {unknown[0]!r}: choose from {', '.join(PIECES)}")
    return chosen


@contextlib.contextmanager
def _secrets_refused():
    """A refused secret file or tracking-server user set-up ends the command with its reason."""
    try:
        yield
    except (SecretFileError, sec.StackAuthError) as exc:
        fail(str(exc))


SERVICE = typer.Option(None, "--service", help="Only this piece (repeat): postgres, mlflow, "
                       "forecast.")


# -- commands --------------------------------------------------------------------------------


@stack_app.command("up")
def up_command(
    folder: Path = DIR,
    pg_port: int | None = typer.Option(None, "--pg-port", min=1, max=65535,
                                       help="PostgreSQL port (default 5433; kept)."),
    mlflow_port: int | None = typer.Option(None, "--mlflow-port", min=1, max=65535,
                                           help="Tracking server port (default 5000; kept)."),
    serve_port: int | None = typer.Option(None, "--serve-port", min=1, max=65535,
                                          help="Forecast server port (default 5001; kept)."),
    host: str | None = typer.Option(None, "--host", help="Interface of the tracking and "
                                    "forecast servers (default 127.0.0.1; kept)."),
    artifacts_destination: str | None = typer.Option(
        None, "--artifacts-destination",
        help="Where the tracking server keeps artifacts (default D/artifacts; s3://, gs:// "
             "work with their client libraries installed; kept)."),
    name: str | None = typer.Option(None, "--name", help="Registered model to serve."),
    alias: str | None = typer.Option(None, "--alias", help="Alias to serve (default champion)."),
    mlflow_auth: bool | None = typer.Option(
        None, "--mlflow-auth/--no-mlflow-auth",
        help="Run the tracking server with MLflow's basic-auth app (default: on when --host "
             "is beyond loopback; kept). Takes effect when the tracking server starts."),
    as_json: bool = json_option("Print the status of each piece as JSON."),
) -> None:
    """Start PostgreSQL, the tracking server and the forecast server (what is not running)."""
    folder = folder.resolve()
    config = _config(folder, save=True, pg_port=pg_port, mlflow_port=mlflow_port,
                     serve_port=serve_port, host=host,
                     artifacts_destination=artifacts_destination, name=name, alias=alias,
                     mlflow_auth=mlflow_auth)
    notes: dict[str, str] = {}
    with _secrets_refused():
        store_note = _start_postgres(folder, config)
        if store_note:
            notes["postgres"] = store_note
        _start_mlflow(folder, config)
        if sec.auth_on(config):
            sec.ensure_mlflow_reader(folder, _tracking_uri(config))
        _write_env(folder, config)
        forecast_note = _start_forecast(folder, config)
        if forecast_note:
            notes["forecast"] = forecast_note
        status = _status(folder, notes)
    if as_json:
        emit_json(status)
    else:
        _print_status(status)


@stack_app.command("down")
def down_command(
    folder: Path = DIR,
    service: list[str] | None = SERVICE,
    as_json: bool = json_option("Print the status of each piece as JSON."),
) -> None:
    """Stop the stack's pieces (forecast server, tracking server, then PostgreSQL)."""
    folder = folder.resolve()
    chosen = _pieces(service)
    for piece in ("forecast", "mlflow"):
        if piece in chosen:
            _stop_group(folder, piece)
    if "postgres" in chosen:
        pg = _postgres(folder, _config(folder))
        if pg.initialised():
            pg.stop()
    with _secrets_refused():
        status = _status(folder)
    if as_json:
        emit_json(status)
    else:
        _print_status(status)


@stack_app.command("status")
def status_command(
    folder: Path = DIR,
    as_json: bool = json_option("Print each piece: running, pid, url, log."),
) -> None:
    """Show each piece of the stack: running or not, its PID, URL and log."""
    if not folder.is_dir():
        fail(f"no stack in {folder}: start one with `jobcast stack up --dir {folder}`")
    with _secrets_refused():
        status = _status(folder.resolve())
    if as_json:
        emit_json(status)
    else:
        _print_status(status)


@stack_app.command("logs")
def logs_command(
    folder: Path = DIR,
    service: list[str] | None = SERVICE,
    lines: int = typer.Option(40, "--lines", "-n", min=1, help="Lines from the end of each."),
) -> None:
    """Print the end of each piece's log."""
    folder = folder.resolve()
    for piece in _pieces(service):
        path = _log(folder, piece)
        console.print(Text(f"== {piece}: {path}", style="bold"), soft_wrap=True)
        console.print(_tail(path, lines), highlight=False, markup=False, soft_wrap=True)
