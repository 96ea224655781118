"""A sweep's design: where a sweep that sizes itself has got to.

`sweep.design` is JSON text: `{}` for a sweep with fixed seeds (every row before 0010).
A `--seeds auto` sweep records there its internal pilot (seeds per arm, the maximum, the
first seed), then, once the pilot ended, the blinded re-estimate and the final seeds per
arm with their reason, and the stage reached, so that a sweep stopped between stages
resumes from it (analysis/internal_pilot.py has the design). No stored number changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    op.add_column("sweep", sa.Column("design", sa.String, nullable=False, server_default="{}"))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
