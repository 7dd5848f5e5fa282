"""A private PostgreSQL server in a folder: what ``jobcast stack`` runs, and tests use.

Rules:

- Binaries: ``$JOBCAST_PG_BIN`` if set, else the folder holding ``initdb`` and ``pg_ctl`` on
  PATH, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql``).
- The cluster lives in ``<root>/pgdata``, its log in ``<root>/logs/postgres.log``; it listens
  on 127.0.0.1:<port> only, over TCP (no unix socket, so no path-length limit), and asks
  for a password (SCRAM). The superuser is ``jobcast``; its password is drawn once at
  ``initdb`` and kept in ``<root>/pg.password`` (mode 0600).
- Least privilege (:meth:`LocalPostgres.ensure_roles`): a database gets a writer role
  (``jobcast_writer``: owns its ``public`` schema and every table in it, so it creates and
  migrates the store, ingests, fits, registers) and a read-only role (``jobcast_reader``:
  CONNECT, USAGE and SELECT, also on tables the writer makes later; nothing else). Nobody
  else may connect to it or make temporary tables there; ``private`` databases (MLflow's)
  are for the superuser only. Each role's password is drawn once and kept in
  ``<root>/pg-<writer|reader>.password`` (0600); it reaches the server only as a SCRAM
  verifier made on this side, so no plain password is ever in a statement or a server log.
- Secret files are read with :func:`fleet.credentials.read_secret`: refused when group- or
  world-readable.
- PostgreSQL refuses to run as root: as root the server runs as the ``postgres`` user
  (``runuser``), which then owns ``pgdata`` and the log and must be able to enter ``root``.
- ``fast`` (tests only): no fsync at initdb or at run time; a crash may lose the data.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fleet.credentials import new_secret, read_secret, secret_or_new, write_secret
from jobcast.cli.errors import CliError

SUPERUSER = "jobcast"
WRITER, READER = "jobcast_writer", "jobcast_reader"
ROLES = {"writer": WRITER, "reader": READER}


class PostgresUnavailable(CliError, RuntimeError):
    """PostgreSQL's server programs are missing or the server cannot be run; says why."""

    kind: ClassVar[str] = "postgres"


def find_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl`` (module rules)."""
    if os.environ.get("JOBCAST_PG_BIN"):
        folder = Path(os.environ["JOBCAST_PG_BIN"])
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
        raise PostgresUnavailable(f"$JOBCAST_PG_BIN={folder} holds no initdb and pg_ctl")
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb).resolve().parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    if found:
        return found[-1].parent
    raise PostgresUnavailable("PostgreSQL server programs (initdb, pg_ctl) not found: install "
                              "them (Debian/Ubuntu: apt-get install postgresql) or set "
                              "$JOBCAST_PG_BIN to their folder")


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the server's user (``postgres`` when we are root)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("runuser"):
        raise PostgresUnavailable("running as root without runuser: PostgreSQL refuses root")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("running as root and there is no 'postgres' user to run "
                                  "PostgreSQL as (it refuses root)") from None
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class LocalPostgres:
    """One PostgreSQL cluster under ``root``, served on ``127.0.0.1:port`` (module rules)."""

    root: Path
    port: int
    fast: bool = False

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    @property
    def data(self) -> Path:
        """The cluster's data folder (``pgdata``)."""
        return self.root / "pgdata"

    @property
    def log(self) -> Path:
        """The server's log file (``logs/postgres.log``)."""
        return self.root / "logs" / "postgres.log"

    @property
    def password_file(self) -> Path:
        """The superuser's password file (0600, never printed)."""
        return self.root / "pg.password"

    def password(self) -> str:
        """The superuser's password, read from its file."""
        return read_secret(self.password_file)

    def role_password_file(self, kind: str) -> Path:
        """Where the ``writer`` or ``reader`` role's password is kept."""
        return self.root / f"pg-{kind}.password"

    def url(self, database: str = "postgres", driver: str = "psycopg",
            role: str | None = None) -> str:
        """The SQLAlchemy URL of ``database`` (password included) as the superuser, or as
        ``role`` (``writer`` or ``reader``, see :meth:`ensure_roles`)."""
        user = ROLES[role] if role else SUPERUSER
        password = read_secret(self.role_password_file(role)) if role else self.password()
        return f"postgresql+{driver}://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def initialised(self) -> bool:
        """The cluster exists: its data folder and its password file."""
        return (self.data / "PG_VERSION").is_file() and self.password_file.is_file()

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [*_as_server_user(), str(find_bin() / args[0]), *args[1:]]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, cwd="/")
        except subprocess.TimeoutExpired:
            raise PostgresUnavailable(f"{args[0]} did not finish in {timeout:.0f} s") from None

    def _give_to_server_user(self, *paths: Path) -> None:
        if _as_server_user():
            for path in paths:
                shutil.chown(path, "postgres", "postgres")

    def init(self) -> bool:
        """Create the cluster unless it exists; returns whether it was created."""
        if self.initialised():
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if _as_server_user():
            self.root.chmod(0o755)
            check = subprocess.run([*_as_server_user(), "test", "-x", str(self.root)],
                                   capture_output=True)
            if check.returncode != 0:
                raise PostgresUnavailable(
                    f"the postgres user cannot enter {self.root} (a parent folder is "
                    "private, e.g. /root): choose a folder it can reach, e.g. under /srv "
                    "or /tmp")
        if self.data.exists():
            shutil.rmtree(self.data)  # a half-made cluster from an interrupted init
        self.data.mkdir(mode=0o700)
        password = new_secret()
        pwfile = write_secret(self.root / ".initdb-password", password)
        self.log.touch()
        self._give_to_server_user(self.data, pwfile, self.log)
        args = ["initdb", "-D", str(self.data), "-U", SUPERUSER, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8",
                "--locale=C"]
        if self.fast:
            args.append("--no-sync")
        try:
            done = self._run(*args)
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {(done.stderr or done.stdout)[-800:]}")
        write_secret(self.password_file, password)
        return True

    def options(self) -> str:
        """``pg_ctl -o`` options: loopback only, this port, no Unix socket (and no fsync when
        ``fast``)."""
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories=''"
        if self.fast:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        return opts

    def running(self) -> bool:
        """``pg_ctl status`` says the server of this data folder runs."""
        return self.data.is_dir() and self._run("pg_ctl", "-D", str(self.data),
                                                "status").returncode == 0

    def start(self, timeout: float = 60) -> None:
        """Start the server (initialised first if needed); returns once it accepts connections."""
        self.init()
        if self.running():
            return
        self.log.touch()
        self._give_to_server_user(self.log)
        done = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                         "-t", str(int(timeout)), "-o", self.options(), "start",
                         timeout=timeout + 30)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-800:] if self.log.is_file() else ""
            raise PostgresUnavailable(
                f"PostgreSQL did not start on 127.0.0.1:{self.port}: "
                f"{(done.stderr or done.stdout).strip()[-400:]} {tail}".strip())

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended); no-op when stopped."""
        if self.running():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def pid(self) -> int | None:
        """The server's process id, or None when it does not run."""
        pidfile = self.data / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0]) if self.running() else None
        except (OSError, ValueError, IndexError):
            return None

    def _connect(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                               password=self.password(), dbname=dbname, autocommit=True)

    def create_database(self, name: str) -> bool:
        """Create database ``name`` unless it exists; returns whether it was created."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"database name {name!r}: use lower-case letters, digits and _")
        with self._connect() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (name,)).fetchone():
                return False
            conn.execute(f'CREATE DATABASE "{name}"')
            return True

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, closing its connections first."""
        with self._connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def ensure_roles(self, database: str, private: tuple[str, ...] = ()) -> None:
        """Least privilege on ``database`` (module rules); safe to repeat. Existing tables
        (e.g. a store the superuser made) are handed to the writer."""
        from psycopg import sql

        with self._connect() as conn:
            for kind, role in ROLES.items():
                password = secret_or_new(self.role_password_file(kind))
                verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(),
                                                        b"scram-sha-256").decode()
                exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                      (role,)).fetchone()
                verb = "ALTER" if exists else "CREATE"
                conn.execute(sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                                     "NOINHERIT PASSWORD {}").format(sql.Identifier(role),
                                                                     sql.Literal(verifier)))
            db, writer, reader = map(sql.Identifier, (database, WRITER, READER))
            conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
            conn.execute(sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                db, writer))
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, reader))
            for name in private:
                conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(
                    sql.Identifier(name)))
        with self._connect(database) as conn:
            conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(writer))
            conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(reader))
            for kind, name in conn.execute(
                    "SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN "
                    "('r', 'p', 'v', 'm') AND pg_get_userbyid(c.relowner) <> %s "
                    "ORDER BY c.relkind DESC", (WRITER,)).fetchall():
                what = {"v": "VIEW", "m": "MATERIALIZED VIEW"}.get(kind, "TABLE")
                conn.execute(sql.SQL("ALTER " + what + " {} OWNER TO {}").format(
                    sql.Identifier("public", name), writer))
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                reader))
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
                                 "GRANT SELECT ON TABLES TO {}").format(writer, reader))
