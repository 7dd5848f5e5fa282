"""Credentials: secret files, new passwords and URLs shown without their password.

Rules:

- A secret file holds one secret (a password, a key, or an env file of them). It is written
  with mode 0600 from the first byte (made under a temporary name with that mode, then
  renamed over the old one), and **refused** on reading when its group or others may read or
  write it: :class:`SecretFileError` names the file, its mode and the ``chmod`` that fixes it.
- New secrets are :func:`new_secret`: 32 URL-safe characters from :mod:`secrets` (192 bits);
  no character needs quoting in a URL, a shell or an ini file.
- Every URL that is printed, logged or put in an error goes through :func:`hide_password`:
  SQLAlchemy's own rendering with the password as ``***``; a string SQLAlchemy cannot parse
  loses anything between ``://user:`` and ``@`` instead.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import ClassVar

from fleet.errors import FleetError

SECRET_MODE = 0o600


class SecretFileError(FleetError, RuntimeError):
    """A secret file is missing, unreadable or readable by others; says which and why."""

    kind: ClassVar[str] = "secret_file"


def new_secret() -> str:
    """A fresh random secret (module rules)."""
    return secrets.token_urlsafe(24)


def write_secret(path: Path, text: str) -> Path:
    """Write ``text`` (plus a newline) to ``path`` with mode 0600 from the start; returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text if text.endswith("\n") else text + "\n")
        os.chmod(tmp, SECRET_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_secret_file(path: Path) -> None:
    """Raise :class:`SecretFileError` unless ``path`` is a file only its owner may read."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SecretFileError(f"{path}: secret file missing") from None
    except OSError as exc:
        raise SecretFileError(f"{path}: cannot read the secret file ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise SecretFileError(f"{path}: a secret file must be a regular file")
    if mode & 0o077:
        raise SecretFileError(
            f"{path}: mode {stat.S_IMODE(mode):04o} lets group or others read this secret "
            f"file; refusing it. Fix with: chmod 600 {path} (and change the secret if others "
            "may have read it)")


def read_secret(path: Path) -> str:
    """The secret in ``path`` (stripped); refused when others may read it (module rules)."""
    check_secret_file(path)
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SecretFileError(f"{path}: cannot read the secret file ({exc.strerror})") from None
    if not value:
        raise SecretFileError(f"{path}: secret file is empty")
    return value


def secret_or_new(path: Path) -> str:
    """The secret kept in ``path``; a new one is drawn and written there the first time."""
    if not Path(path).exists():
        write_secret(path, new_secret())
    return read_secret(path)


def hide_password(url: str) -> str:
    """``url`` fit to print, log or put in an error: its password shown as ``***``."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", str(url))
