"""``jobcast token create|list|revoke``: the bearer tokens of ``jobcast serve``.

The token file and its rules: :mod:`jobcast.mlops.auth`. ``create`` prints the token once
(stdout, or ``token`` in its JSON); nothing prints it again.
"""

from __future__ import annotations

from pathlib import Path

import typer

from jobcast.cli.options import STORE, json_option
from jobcast.cli.output import console, emit_json, fail, note

token_app = typer.Typer(
    help="Bearer tokens for `jobcast serve` (hashed in a 0600 token file).",
    no_args_is_help=True,
)

TOKENS = typer.Option(
    None, "--tokens", envvar="JOBCAST_TOKENS",
    help="Token file (default: jobcast-tokens.json in the store's folder).",
)


def register(app: typer.Typer) -> None:
    """Add the ``token`` command group to ``app``."""
    app.add_typer(token_app, name="token")


def _path(tokens: Path | None, store: str | None) -> Path:
    from jobcast.mlops.auth import default_token_path

    return tokens or default_token_path(store)


@token_app.command("create")
def create_command(
    name: str = typer.Option(..., "--name", help="Who holds it (unique among live tokens)."),
    tokens: Path | None = TOKENS,
    store: str | None = STORE,
    as_json: bool = json_option("Print the new token's record and the token as JSON."),
) -> None:
    """Create a token and print it once; the file keeps only its SHA-256."""
    from jobcast.mlops.auth import TokenError, create_token

    path = _path(tokens, store)
    try:
        record, token = create_token(path, name)
    except (TokenError, OSError) as exc:
        fail(str(exc))
    if as_json:
        emit_json({**record.public(), "file": str(path), "token": token})
        return
    note("", f"created token {record.id} ({record.name}) in {path}; it is shown once, now:",
         err=True)
    console.print(token, soft_wrap=True, markup=False, highlight=False)


@token_app.command("list")
def list_command(
    tokens: Path | None = TOKENS,
    store: str | None = STORE,
    as_json: bool = json_option("Print the tokens' records as JSON."),
) -> None:
    """List the tokens: id, name, created, revoked (never the tokens)."""
    from jobcast.mlops.auth import TokenError, read_tokens

    path = _path(tokens, store)
    try:
        records = [r.public() for r in read_tokens(path)]
    except TokenError as exc:
        fail(str(exc))
    if as_json:
        emit_json({"file": str(path), "tokens": records})
        return
    if not records:
        note("", f"no tokens in {path}")
        return
    for r in records:
        state = f"revoked {r['revoked']}" if r["revoked"] else "active"
        note("", f"{r['id']}  {r['name']}  created {r['created']}  {state}")


@token_app.command("revoke")
def revoke_command(
    which: str = typer.Argument(..., help="Token id or name."),
    tokens: Path | None = TOKENS,
    store: str | None = STORE,
    as_json: bool = json_option("Print the revoked token's record as JSON."),
) -> None:
    """Revoke a token; a running server refuses it within a second."""
    from jobcast.mlops.auth import TokenError, revoke_token

    path = _path(tokens, store)
    try:
        record = revoke_token(path, which)
    except (TokenError, OSError) as exc:
        fail(str(exc))
    if as_json:
        emit_json({**record.public(), "file": str(path)})
        return
    note("", f"revoked token {record.id} ({record.name}) at {record.revoked}")
