"""Who may do what in the team stack, and where its secrets live (``jobcast stack``).

Rules (``D`` is the stack's folder):

- **Store roles**: the writer (``jobcast_writer``) ingests, fits, registers and migrates; the
  reader (``jobcast_reader``) may only SELECT: predict, serve, report
  (:meth:`jobcast.cli.postgres.LocalPostgres.ensure_roles`).
- **MLflow basic auth**: on when ``--mlflow-auth`` says so, else when the servers bind beyond
  loopback. The tracking server runs ``mlflow server --app-name basic-auth`` with
  ``D/mlflow-auth/basic_auth.ini`` (no secret in it: users in ``D/mlflow-auth/basic_auth.db``,
  default permission READ). Its admin (``admin``) password and the Flask key reach it in the
  environment only (``MLFLOW_AUTH_ADMIN_PASSWORD``, ``MLFLOW_FLASK_SERVER_SECRET_KEY``). A
  user ``jobcast-reader`` (READ on everything, by the default permission) is made for the
  forecast server and ``D/reader.env``.
- **Secret files**, 0600, drawn once, refused when group- or world-readable
  (:mod:`fleet.credentials`): ``D/pg.password`` (superuser), ``D/pg-writer.password``,
  ``D/pg-reader.password``, ``D/mlflow-admin.password``, ``D/mlflow-reader.password``,
  ``D/mlflow-flask.key``, and the two env files made from them: ``D/env`` (writer:
  ``JOBCAST_STORE`` as the writer, ``MLFLOW_TRACKING_URI``, and with auth on
  ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` as the admin) and ``D/reader.env``
  (the same as the reader). No secret is ever put on a command line: children get them in
  their environment.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from fleet.credentials import read_secret, secret_or_new, write_secret
from jobcast.cli.errors import CliError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MLFLOW_ADMIN, MLFLOW_READER = "admin", "jobcast-reader"
SECRET_FILES = ("pg.password", "pg-writer.password", "pg-reader.password",
                "mlflow-admin.password", "mlflow-reader.password", "mlflow-flask.key",
                "env", "reader.env", "tokens.json", "team.token")
AUTH_INI = """[mlflow]
default_permission = READ
database_uri = sqlite:///{db}
admin_username = {admin}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
"""


class StackAuthError(CliError, RuntimeError):
    """The tracking server's users could not be set up; says why (never a secret)."""

    kind: ClassVar[str] = "stack_auth"


def auth_on(config: dict) -> bool:
    """MLflow basic auth: ``mlflow_auth`` if set, else whether ``host`` is beyond loopback."""
    if config.get("mlflow_auth") is not None:
        return bool(config["mlflow_auth"])
    return config["host"] not in LOOPBACK


def secret_files(folder: Path) -> list[Path]:
    """The stack's secret files that exist (for checks and the tests' scan)."""
    return [folder / name for name in SECRET_FILES if (folder / name).exists()]


def mlflow_server_env(folder: Path, env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The tracking server's environment and extra arguments with auth on (module rules)."""
    if importlib.util.find_spec("flask_wtf") is None:
        raise StackAuthError("MLflow's basic-auth app needs Flask-WTF, which is not "
                             "installed: pip install 'mlflow[auth]'")
    auth = folder / "mlflow-auth"
    auth.mkdir(parents=True, exist_ok=True)
    ini = auth / "basic_auth.ini"
    ini.write_text(AUTH_INI.format(db=(auth / "basic_auth.db").resolve(), admin=MLFLOW_ADMIN),
                   encoding="utf-8")
    env = {**env, "MLFLOW_AUTH_CONFIG_PATH": str(ini),
           "MLFLOW_AUTH_ADMIN_PASSWORD": secret_or_new(folder / "mlflow-admin.password"),
           "MLFLOW_FLASK_SERVER_SECRET_KEY": secret_or_new(folder / "mlflow-flask.key")}
    env.pop("MLFLOW_AUTH_ADMIN_USERNAME", None)
    return env, ["--app-name", "basic-auth"]


def _call(url: str, method: str, body: dict, user: str, password: str) -> int:
    import urllib.error  # here: every other command starts without them
    import urllib.request

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        raise StackAuthError(f"tracking server at {url.split('/api/')[0]}: {exc}") from None


def ensure_mlflow_reader(folder: Path, tracking_uri: str) -> None:
    """Create (or re-key) the tracking server's read-only user ``jobcast-reader``."""
    admin = read_secret(folder / "mlflow-admin.password")
    password = secret_or_new(folder / "mlflow-reader.password")
    body = {"username": MLFLOW_READER, "password": password}
    status = _call(f"{tracking_uri}/api/2.0/mlflow/users/create", "POST", body,
                   MLFLOW_ADMIN, admin)
    if status != 200:  # already there: make its password the one in the file
        status = _call(f"{tracking_uri}/api/2.0/mlflow/users/update-password", "PATCH", body,
                       MLFLOW_ADMIN, admin)
    if status == 404:
        raise StackAuthError(f"the tracking server at {tracking_uri} runs without MLflow's "
                             "basic-auth app (started before auth was asked for): restart it "
                             "with `jobcast stack down --service mlflow` and `jobcast stack up`")
    if status != 200:
        raise StackAuthError(f"tracking server at {tracking_uri} refused to set up user "
                             f"{MLFLOW_READER!r} (HTTP {status}); see its log")


def client_env(folder: Path, config: dict, kind: str, store_url: str,
               tracking_uri: str) -> dict[str, str]:
    """What a ``writer`` or ``reader`` client needs: ``store_url`` (the store as that role),
    the tracking URI and, with auth on, the tracking server's user and password."""
    env = {"JOBCAST_STORE": store_url, "MLFLOW_TRACKING_URI": tracking_uri}
    if auth_on(config):
        user, file = ((MLFLOW_ADMIN, "mlflow-admin.password") if kind == "writer"
                      else (MLFLOW_READER, "mlflow-reader.password"))
        env["MLFLOW_TRACKING_USERNAME"] = user
        env["MLFLOW_TRACKING_PASSWORD"] = read_secret(folder / file)
    return env


def write_env_files(folder: Path, config: dict, store_urls: dict[str, str],
                    tracking_uri: str) -> None:
    """``D/env`` (writer) and ``D/reader.env`` (reader), each 0600 (module rules);
    ``store_urls`` maps ``writer`` and ``reader`` to the store's URL as that role."""
    for kind, name in (("writer", "env"), ("reader", "reader.env")):
        env = client_env(folder, config, kind, store_urls[kind], tracking_uri)
        write_secret(folder / name, "\n".join(f"export {k}='{v}'" for k, v in env.items()))


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set for the block, then as before."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def serve_tokens(folder: Path, config: dict) -> Path:
    """The forecast server's token file, ``D/tokens.json``. Beyond loopback the server
    refuses to start without a live token, so the first ``up`` there makes one named
    ``team`` and keeps it in ``D/team.token`` (0600, never printed): hand it to the team,
    and make more with ``jobcast token create --tokens D/tokens.json``."""
    from jobcast.mlops.auth import create_token, read_tokens
    from jobcast.mlops.serving import is_loopback

    path = folder / "tokens.json"
    if not is_loopback(config["host"]) and not any(
            not r.revoked for r in read_tokens(path)):
        _, token = create_token(path, "team")
        write_secret(folder / "team.token", token)
    return path
