"""Deployment keys rewritten to the GPU's canonical key (one GPU identity).

Revision ID: 0004
Revises: 0003

Keys were built from the log's spelling of the GPU, so one GPU had several keys
(``nvidia-a100-sxm-80gb-x8`` from MLPerf's ``A100-SXM-80GB``, ``nvidia-a100-sxm4-80gb-x8`` from
nvidia-smi's ``A100-SXM4-80GB``) and a request in one spelling missed history stored in the
other. This revision rewrites every stored key to :func:`fleet.deployment.canonical_key` of
the code that runs it; no row is added or removed from ``runs``:

- ``runs.deployment``, and the keys inside ``runs.meta`` (``deployment_key``, set by
  ``--deployment``; ``log_deployment.key``, kept by ``--override``); ``runs.accelerator`` keeps
  the log's own spelling;
- ``models``: fitted models whose key changed, or whose key now also holds runs stored under
  another spelling, are dropped (their ids and evidence name the old keys), and with any of
  them the fitted ``artifacts`` (fitted with the models, they summarise runs by key); run
  ``jobcast fit`` to refit them. Other models stay as they are.

A key that does not parse is left as it is. Downgrade keeps the canonical keys (the old
spellings are not recorded anywhere): older code reads them as any other key.
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("deployment", sa.String),
                 sa.column("meta", sa.Text))
_models = sa.table("models", sa.column("model_id", sa.String), sa.column("deployment", sa.String))
_BATCH = 500


def _canonical(key: str | None, cache: dict) -> str | None:
    """The canonical key of ``key`` (as it was where it does not parse)."""
    from fleet.deployment import canonical_key

    if not isinstance(key, str) or not key.strip():
        return key
    if key not in cache:
        try:
            cache[key] = canonical_key(key)
        except ValueError:
            cache[key] = key
    return cache[key]


def _meta(text: str | None, cache: dict) -> str | None:
    """``runs.meta`` with its deployment keys canonical (the same text when none changes)."""
    try:
        meta = json.loads(text or "{}")
    except ValueError:
        return text
    if not isinstance(meta, dict):
        return text
    changed = False
    if isinstance(meta.get("deployment_key"), str):
        new = _canonical(meta["deployment_key"], cache)
        changed |= new != meta["deployment_key"]
        meta["deployment_key"] = new
    logged = meta.get("log_deployment")
    if isinstance(logged, dict) and isinstance(logged.get("key"), str):
        new = _canonical(logged["key"], cache)
        changed |= new != logged["key"]
        logged["key"] = new
    return json.dumps(meta, default=str, sort_keys=True) if changed else text


def upgrade() -> None:
    """Rewrite the stored deployment keys to the canonical ones (module doc)."""
    conn = op.get_bind()
    cache: dict[str, str] = {}
    updates = []
    targets: set[str | None] = set()  # keys that now hold runs stored under another spelling
    for run_id, key, meta in conn.execute(sa.select(_runs.c.id, _runs.c.deployment,
                                                    _runs.c.meta)):
        new_key, new_meta = _canonical(key, cache), _meta(meta, cache)
        if new_key != key:
            targets.add(new_key)
        if new_key != key or new_meta != meta:
            updates.append({"_id": run_id, "_key": new_key, "_meta": new_meta})
    statement = (_runs.update().where(_runs.c.id == sa.bindparam("_id"))
                 .values(deployment=sa.bindparam("_key"), meta=sa.bindparam("_meta")))
    for i in range(0, len(updates), _BATCH):
        conn.execute(statement, updates[i:i + _BATCH])
    stale = [model_id for model_id, key in conn.execute(sa.select(_models.c.model_id,
                                                                  _models.c.deployment))
             if key in targets or _canonical(key, cache) != key]
    for i in range(0, len(stale), _BATCH):
        conn.execute(_models.delete().where(_models.c.model_id.in_(stale[i:i + _BATCH])))
    if (stale or targets) and sa.inspect(conn).has_table("artifacts"):
        conn.execute(sa.table("artifacts").delete())


def downgrade() -> None:
    """Nothing: the canonical keys stay (module doc)."""
    pass  # the canonical keys stay (module doc)
