"""Rejected files and why (``rejections``), an index on ``files.source``, and the
``schema_info`` table retired (the version table is the one record of the schema).

Revision ID: 0002
Revises: 0001

``rejections``: one row per file an ingest refused (source, content hash when the file could
be read, line, reason, time), so the report can list what was left out and why.
``ix_files_source``: the report and the ingest's warnings look files up by source.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``rejections`` and the source indexes; drop ``schema_info``."""
    op.create_table(
        "rejections",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64)),
        sa.Column("line", sa.Integer),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("rejected_at", sa.Float, nullable=False),
    )
    op.create_index("ix_rejections_source", "rejections", ["source"])
    op.create_index("ix_files_source", "files", ["source"])
    op.drop_table("schema_info")


def downgrade() -> None:
    """Back to 0001: ``schema_info`` at version 1, no ``rejections``."""
    schema_info = op.create_table(
        "schema_info", sa.Column("version", sa.Integer, primary_key=True)
    )
    op.bulk_insert(schema_info, [{"version": 1}])
    op.drop_index("ix_files_source", table_name="files")
    op.drop_index("ix_rejections_source", table_name="rejections")
    op.drop_table("rejections")
