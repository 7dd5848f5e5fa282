"""``jobcast store``: the store's schema revision (``version``) and its migration (``upgrade``).

Rules (the schema's are in :mod:`ingest.migrations`; the door is
:mod:`jobcast.service.features.stores`):

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
    """``url`` without its password (:func:`jobcast.service.features.stores.hide_password`)."""
    from jobcast.service.features.stores import hide_password

    return hide_password(url)


def store_url_of(url: str | None) -> str:
    """The store URL a command uses (``--store``, else ``$JOBCAST_STORE``, else the default)."""
    from jobcast.service.features.stores import store_url

    return store_url(url)


ADVICE = {
    "current": "up to date",
    "empty": "empty: created at this revision on first use",
    "outdated": "older than this jobcast: run `jobcast store upgrade`",
    "newer": "made by a newer jobcast: upgrade jobcast to use it",
}


@store_app.command("version")
def version_command(
    store: str | None = STORE,
    as_json: bool = json_option("Print the store, its revision, this jobcast's and the status."),
) -> None:
    """Show the store's schema revision against this jobcast's (exit 1 if they differ)."""
    from jobcast.service.features.stores import StoreError, store_status

    try:
        found = store_status(store)
    except StoreError as exc:
        fail(exc)
    if as_json:
        emit_json(found.to_dict())
    elif not found.exists:  # read, never create: a missing file is empty
        note("", f"store {found.store}: not created yet (this jobcast reads {found.head}; "
                 "created at it on first ingest)")
    else:
        note("", f"store {found.store}: revision {found.revision or '(none)'}, this jobcast "
                 f"reads {found.head}: {ADVICE[found.status]}")
    raise typer.Exit(0 if found.usable else 1)


@store_app.command("upgrade")
def upgrade_command(
    store: str | None = STORE,
    as_json: bool = json_option("Print the store and its revision before and after."),
) -> None:
    """Migrate the store to this jobcast's schema revision (data kept; all steps or none)."""
    from jobcast.service.features.stores import StoreError, upgrade_store

    try:
        done = upgrade_store(store)
    except StoreError as exc:
        fail(exc)
    if as_json:
        emit_json(done.to_dict())
    elif not done.changed:
        note("", f"store {done.store} is already at revision {done.after}")
    else:
        note("", f"upgraded store {done.store} from revision {done.before or '(empty)'} to "
                 f"{done.after}")
