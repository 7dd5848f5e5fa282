"""Fitted artifacts beside the phase models (``artifacts``): the backtest selector that says
which candidate answer to trust and the run summaries the rate candidates read.

Revision ID: 0003
Revises: 0002

One row per artifact name (``selector``, ``history``), its JSON and when it was fitted;
``jobcast fit`` replaces them with the models, in the same transaction.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``artifacts``."""
    op.create_table(
        "artifacts",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("fitted_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    """Drop ``artifacts``."""
    op.drop_table("artifacts")
