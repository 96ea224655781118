"""The run's data fingerprint: what it trained and evaluated on, and what it dropped.

`run.data_fingerprint` is JSON text: for the training data its hash (a file's bytes, a hub
dataset's name and split, or the embedded task's generator), the problems kept and those
dropped because their prompt left the model no room to answer (data/prompt_length.py);
for the eval data its source, hash, subset size and overlong drops. `{}` on old rows: they
were written before the count existed (their drops, if any, are in the step metrics
train/overlong_prompts_dropped and eval/overlong_problems_dropped).
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.add_column("run", sa.Column("data_fingerprint", sa.String, nullable=False, server_default="{}"))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
