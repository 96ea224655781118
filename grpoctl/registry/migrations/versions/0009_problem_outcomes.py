"""Per-problem outcomes: which problems an eval row got right.

`evalresult.outcomes` holds, for each problem of the row's eval set in the order of their
ids (the list its `subset_hash` hashes), how many of its samples were right, with each
problem's level (registry/outcomes.py has the format). It is NULL on every older row:
"not recorded". No stored number changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.add_column("evalresult", sa.Column("outcomes", sa.String, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see README: Registry)")
