"""Sweep members on many machines: a stop request per run, and the members' logs.

`run.stop_requested_at` is set by `grpoctl runs stop RUN` and read by the run's own
trainer (its heartbeat thread), so one run can be stopped from any machine that reaches
the registry, whichever executor started it; a new claim on the run clears it.

`runlog` holds what a sweep member's trainer printed, in chunks, keyed by run name (the
first lines come before the trainer has created its run, and a trainer that fails its
checks never creates one), so `grpoctl runs logs RUN` reads it wherever it ran.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.add_column("run", sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "runlog",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_name", sa.String, nullable=False),
        sa.Column("host", sa.String, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("text", sa.String, nullable=False),
    )
    op.create_index("ix_runlog_run_name", "runlog", ["run_name"])


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
