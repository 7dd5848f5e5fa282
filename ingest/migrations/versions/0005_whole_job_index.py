"""The whole-job index (``whole_jobs``): one recurring job's history read by its key.

Revision ID: 0005
Revises: 0004

``jobcast predict --job NAME`` read a job's scheduler records out of every candidate run's
JSON ``meta``; at a cluster's scale (300,000 jobs) that took seconds. This revision adds
``whole_jobs`` (:mod:`ingest.tables`; rules in :mod:`ingest.job_index`): one row per stored
whole-job run with its job key (indexed), state, wall seconds, times, GPUs, names, scheduler
identity and training length, filled here for the runs already stored (by the same
``index_row`` the store's writes use) and by every later write. No other table changes.
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_BATCH = 500


def upgrade() -> None:
    """Create ``whole_jobs`` and index the whole-job runs already stored."""
    from ingest.job_index import index_row

    whole_jobs = op.create_table(
        "whole_jobs",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("job_key", sa.Text, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("start", sa.Float),
        sa.Column("end", sa.Float),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("ident", sa.Text, nullable=False),
        sa.Column("length_unit", sa.String(16)),
        sa.Column("length_count", sa.BigInteger),
    )
    op.create_index("ix_whole_jobs_job_key", "whole_jobs", ["job_key"])
    conn = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("file_id", sa.Integer),
                    sa.column("network", sa.String), sa.column("meta", sa.Text))
    files = sa.table("files", sa.column("id", sa.Integer), sa.column("source", sa.Text))
    query = (sa.select(runs.c.id, runs.c.network, runs.c.meta, files.c.source)
             .join(files, runs.c.file_id == files.c.id)
             .where(runs.c.meta.contains('"whole_job"', autoescape=True)))
    rows = []
    for run_id, network, meta, source in conn.execute(query).all():
        try:
            decoded = json.loads(meta or "{}")
        except ValueError:
            continue
        row = index_row(decoded, network, source)
        if row is not None:
            rows.append({**row, "run_id": run_id})
    for i in range(0, len(rows), _BATCH):
        conn.execute(whole_jobs.insert(), rows[i:i + _BATCH])


def downgrade() -> None:
    """Drop ``whole_jobs``."""
    op.drop_table("whole_jobs")
