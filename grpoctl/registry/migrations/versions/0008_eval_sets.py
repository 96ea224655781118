"""Several eval sets per run: which set an eval row is of, and whether it is the headline.

`evalresult.eval_set` names the row's eval set (eval.sets); it is `""` for a run's one
unnamed set, which every run before this revision had. `evalresult.headline` is true for
the rows of the run's headline set (the first of eval.sets), whose greedy rows make the
run's accuracy curve; every old row is its run's headline, so no old row changes meaning.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("evalresult", sa.Column("eval_set", sa.String, nullable=False, server_default=""))
    op.add_column("evalresult", sa.Column("headline", sa.Boolean, nullable=False, server_default=sa.true()))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
