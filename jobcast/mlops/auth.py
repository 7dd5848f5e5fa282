"""Bearer tokens for ``jobcast serve``: the token file, and who may ask.

Rules:

* **A token** is ``jct_<id>_<secret>``: ``id`` 8 hex digits (it names the token in ``list``
  and ``revoke``; not secret), ``secret`` 32 random bytes (:func:`secrets.token_urlsafe`).
  It is shown once, when created; the file keeps only its SHA-256. A 256-bit random secret
  needs no slow hash (nothing to guess from the digest); digests are compared in constant
  time (:func:`hmac.compare_digest`).
* **The token file** (``--tokens FILE``, ``$JOBCAST_TOKENS``, else ``jobcast-tokens.json``
  in the store's folder) is JSON ``{"version": 1, "tokens": [{id, name, created, revoked,
  sha256}]}``. It is created 0600 and rewritten atomically (a 0600 temporary file renamed
  over it); a file that its group or others may read or write is refused, as is one that is
  not valid, so a server never starts on a token file someone else could have read.
* **Names** are unique among tokens not revoked (letters, digits, ``._-``, at most 64).
  ``revoke`` takes an id or a name; a revoked token stays listed (``revoked`` time).
* **Checking** (:class:`TokenVerifier`): ``Authorization: Bearer <token>``. No header, or a
  header that is not one bearer token of the right form: ``missing``/``malformed`` (401);
  a well-formed token not in the file, or revoked: ``invalid``/``revoked`` (403). A running
  server re-reads the file when it changes (checked at most once a second), so a token
  revoked or created while it serves counts from then on; a file that became unreadable or
  unsafe keeps the last good list, and the server says so once on stderr.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from fleet.credentials import SecretFileError, check_secret_file, write_secret
from jobcast.mlops.errors import MlopsError

TOKEN_FILE = "jobcast-tokens.json"
TOKENS_ENV = "JOBCAST_TOKENS"
PREFIX = "jct_"
_TOKEN = re.compile(r"^jct_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
RELOAD_EVERY_S = 1.0


class TokenError(MlopsError, ValueError):
    """A token file or a token request that cannot be used (the message says why)."""

    kind: ClassVar[str] = "token"


@dataclass(frozen=True)
class TokenRecord:
    """One token as the file keeps it (never the token itself)."""

    id: str
    name: str
    created: str
    revoked: str | None
    sha256: str

    def public(self) -> dict:
        """What ``token list`` shows: everything but the digest."""
        return {"id": self.id, "name": self.name, "created": self.created,
                "revoked": self.revoked}


def default_token_path(store_url: str | None = None) -> Path:
    """``$JOBCAST_TOKENS``, else ``jobcast-tokens.json`` in the store's folder (the current
    folder for a store that is not a SQLite file; ``$JOBCAST_STORE`` when no store is given)."""
    if os.environ.get(TOKENS_ENV):
        return Path(os.environ[TOKENS_ENV]).expanduser()
    from jobcast.mlops.tracking import store_folder

    return store_folder(store_url or os.environ.get("JOBCAST_STORE")) / TOKEN_FILE


def digest(token: str) -> str:
    """The SHA-256 hex digest of a token: all a token file keeps of it."""
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_private(path: Path) -> None:
    """Refuse ``path`` when its group or others may read or write it
    (:func:`fleet.credentials.check_secret_file`, the one check of a secret file)."""
    try:
        check_secret_file(path)
    except SecretFileError as exc:
        raise TokenError(str(exc)) from None


def read_tokens(path: Path) -> list[TokenRecord]:
    """The records of a token file (checked private and well formed); [] when it is absent."""
    if not path.exists():
        return []
    check_private(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        records = [TokenRecord(**{k: rec[k] for k in TokenRecord.__dataclass_fields__})
                   for rec in doc["tokens"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenError(f"the token file {path} is not a jobcast token file "
                         f"({type(exc).__name__}); recreate it with `jobcast token create`") \
            from None
    return records


def _write_tokens(path: Path, records: list[TokenRecord]) -> None:
    """Rewrite the token file atomically, 0600 from its first byte."""
    write_secret(path, json.dumps({"version": 1, "tokens": [asdict(r) for r in records]},
                                  indent=2))


def create_token(path: Path, name: str) -> tuple[TokenRecord, str]:
    """Add a token named ``name`` to the file (created 0600 when absent); the record and the
    token, which exists nowhere else afterwards."""
    if not _NAME.match(name):
        raise TokenError(f"token name {name[:80]!r}: use 1-64 letters, digits, '.', '_', '-'")
    records = read_tokens(path)
    if any(r.name == name and r.revoked is None for r in records):
        raise TokenError(f"a token named {name!r} exists in {path}; revoke it first or "
                         "choose another name")
    ids = {r.id for r in records}
    token_id = secrets.token_hex(4)
    while token_id in ids:
        token_id = secrets.token_hex(4)
    token = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    record = TokenRecord(token_id, name, _now(), None, digest(token))
    _write_tokens(path, [*records, record])
    return record, token


def revoke_token(path: Path, which: str) -> TokenRecord:
    """Revoke the token whose id or (not revoked) name is ``which``; the revoked record."""
    records = read_tokens(path)
    hits = [i for i, r in enumerate(records)
            if r.id == which or (r.name == which and r.revoked is None)]
    if not hits:
        raise TokenError(f"no token with id or name {which[:80]!r} in {path} (see "
                         "`jobcast token list`)")
    i = hits[0]
    if records[i].revoked is not None:
        return records[i]
    records[i] = TokenRecord(**{**asdict(records[i]), "revoked": _now()})
    _write_tokens(path, records)
    return records[i]


class TokenVerifier:
    """Who may ask (module rules): :meth:`check` says ``ok`` or why not."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._active: dict[str, str] = {}  # id -> digest
        self._revoked: set[str] = set()
        self._reload(force=True)

    def active_count(self) -> int:
        """How many tokens are active (not revoked) in the file as last read."""
        return len(self._active)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_EVERY_S:
            return
        with self._lock:
            self._checked = now
            try:
                st = self.path.stat()
                seen = (st.st_mtime_ns, st.st_size, st.st_ino)
                if seen == self._seen:
                    return
                records = read_tokens(self.path)
            except (OSError, TokenError) as exc:
                if force:
                    raise TokenError(str(exc)) from None
                if self._seen is not None:
                    print(f"warning: keeping the last good token list: {exc}", file=sys.stderr)
                    self._seen = None
                return
            self._seen = seen
            self._active = {r.id: r.sha256 for r in records if r.revoked is None}
            self._revoked = {r.id for r in records if r.revoked is not None}

    def check(self, authorization: bytes | None) -> str:
        """``ok``, ``missing``, ``malformed`` (401) or ``invalid``, ``revoked`` (403)."""
        if authorization is None:
            return "missing"
        scheme, _, value = authorization.decode("latin-1").strip().partition(" ")
        match = _TOKEN.match(value.strip()) if scheme.lower() == "bearer" else None
        if match is None:
            return "malformed"
        self._reload()
        token_id = match.group(1)
        expected = self._active.get(token_id)
        if expected is None or not hmac.compare_digest(expected, digest(value.strip())):
            return "revoked" if token_id in self._revoked else "invalid"
        return "ok"
