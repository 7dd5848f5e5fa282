"""The door to the stack's secret files for the commands (``jobcast stack``, ``jobcast
postgres``): what is defined in :mod:`ingest.credentials`, re-exported here so the CLI imports
only the service.

Rules (theirs): a secret lives in a file of its own, readable by its owner only, written
atomically; it never appears on a command line, in a log or in an error message. A URL is
shown without its password (:func:`hide_password`). A file that is missing, empty or readable
by others is a :class:`SecretFileError` (a :class:`fleet.errors.JobcastError`).
"""

from __future__ import annotations

from ingest.credentials import (
    SecretFileError,
    check_secret_file,
    hide_password,
    new_secret,
    read_secret,
    secret_or_new,
    write_secret,
)

__all__ = ["SecretFileError", "check_secret_file", "hide_password", "new_secret",
           "read_secret", "secret_or_new", "write_secret"]
