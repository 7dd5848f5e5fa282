"""``jobcast store``: the store's schema revision (``version``) and its migration (``upgrade``).

Rules (the schema's are in :mod:`ingest.migrations`):

- Every other command opens a store at the code's revision only; a store made by an older
  jobcast is refused until ``jobcast store upgrade`` migrates it. This holds for SQLite files
  and PostgreSQL alike: nothing is migrated implicitly.
- ``upgrade`` runs the missing revisions in one locked transaction (all or none); it is a
  no-op on a current store, builds an empty database at the newest revision, and refuses a
  store made by a newer jobcast.
- ``version`` exits 0 when the store is current or empty (created on first use; a SQLite
  file that does not exist is not created by looking), 1 when it needs ``upgrade`` or a newer
  jobcast (so a service unit or cron job can check first).
- URLs are printed without their password, and as written (never read as Rich markup).
"""

from __future__ import annotations

import typer

from jobcast.cli.options import STORE, json_option
from jobcast.cli.output import emit_json, fail, note

store_app = typer.Typer(
    help="The store's schema: show its revision, migrate it to this jobcast's.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``store`` sub-command group to ``app``."""
    app.add_typer(store_app, name="store")


def shown(url: str) -> str:
    """``url`` without its password (:func:`ingest.credentials.hide_password`)."""
    from ingest.credentials import hide_password

    return hide_password(url)


def store_url_of(url: str | None) -> str:
    """The store URL a command uses (``--store``, else ``$JOBCAST_STORE``, else the default)."""
    from ingest.store import store_url

    return store_url(url)


def _engine(url: str | None):
    from ingest.store import make_engine, store_url

    resolved = store_url(url)
    try:
        return resolved, make_engine(resolved)
    except Exception as exc:  # bad URL, missing driver
        fail(f"cannot open store {shown(resolved)}: {exc}")


@store_app.command("version")
def version_command(
    store: str | None = STORE,
    as_json: bool = json_option("Print the store, its revision, this jobcast's and the status."),
) -> None:
    """Show the store's schema revision against this jobcast's (exit 1 if they differ)."""
    from ingest.home import sqlite_path
    from ingest.migrations import HEAD, REVISIONS, SchemaVersionError, state

    path = sqlite_path(store_url_of(store))
    if path is not None and not path.exists():  # read, never create: a missing file is empty
        url = store_url_of(store)
        if as_json:
            emit_json({"store": shown(url), "revision": None, "head": HEAD, "status": "empty",
                       "revisions": list(REVISIONS), "exists": False})
        else:
            note("", f"store {shown(url)}: not created yet (this jobcast reads {HEAD}; "
                     "created at it on first ingest)")
        raise typer.Exit(0)
    url, engine = _engine(store)
    try:
        found = state(engine)
    except SchemaVersionError as exc:
        fail(f"store {shown(url)}: {exc}")
    except Exception as exc:  # unreachable server, unreadable file
        fail(f"cannot open store {shown(url)}: {getattr(exc, 'orig', None) or exc}")
    finally:
        engine.dispose()
    advice = {
        "current": "up to date",
        "empty": "empty: created at this revision on first use",
        "outdated": "older than this jobcast: run `jobcast store upgrade`",
        "newer": "made by a newer jobcast: upgrade jobcast to use it",
    }[found.status]
    if as_json:
        emit_json({"store": shown(url), "revision": found.revision, "head": HEAD,
                   "status": found.status, "revisions": list(REVISIONS)})
    else:
        note("", f"store {shown(url)}: revision {found.revision or '(none)'}, this jobcast "
                 f"reads {HEAD}: {advice}")
    raise typer.Exit(0 if found.status in ("current", "empty") else 1)


@store_app.command("upgrade")
def upgrade_command(
    store: str | None = STORE,
    as_json: bool = json_option("Print the store and its revision before and after."),
) -> None:
    """Migrate the store to this jobcast's schema revision (data kept; all steps or none)."""
    from ingest.migrations import SchemaVersionError, upgrade

    url, engine = _engine(store)
    try:
        before, after = upgrade(engine)
    except SchemaVersionError as exc:
        fail(f"store {shown(url)}: {exc}")
    except Exception as exc:  # unreachable server, a migration the database refused
        reason = getattr(exc, "orig", None) or exc
        fail(f"cannot upgrade store {shown(url)} (nothing changed): {reason}")
    finally:
        engine.dispose()
    if as_json:
        emit_json({"store": shown(url), "from": before, "to": after,
                   "changed": before != after})
    elif before == after:
        note("", f"store {shown(url)} is already at revision {after}")
    else:
        note("", f"upgraded store {shown(url)} from revision {before or '(empty)'} to "
                 f"{after}")
