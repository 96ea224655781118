"""One writer per run: a claim (token, holder, lease) on each run, and unique step keys.

`train` and `--resume` take the run's claim with a compare-and-set on claim_token, and
every commit of the trainer checks it (registry/claims.py). The unique index on
(run_id, step, opt_step, name) is the backstop that makes a duplicated metric row
impossible whatever happens above it; opt_step is NULL for per-step rows and NULLs are
distinct in a plain unique index (SQLite and PostgreSQL alike), hence COALESCE.

Registries written before could hold duplicated keys (two resumers racing, which this
revision makes impossible); the first row written of each key is kept, the later
copies are deleted, so that the index can be built.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.add_column("run", sa.Column("claim_token", sa.String, nullable=True))
    op.add_column("run", sa.Column("claim_host", sa.String, nullable=True))
    op.add_column("run", sa.Column("claim_pid", sa.Integer, nullable=True))
    op.add_column("run", sa.Column("claim_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "DELETE FROM metric WHERE id NOT IN ("
        "SELECT min(id) FROM metric GROUP BY run_id, step, coalesce(opt_step, -1), name)"
    )
    op.create_index(
        "ux_metric_step_key", "metric", ["run_id", "step", sa.text("coalesce(opt_step, -1)"), "name"], unique=True
    )


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
