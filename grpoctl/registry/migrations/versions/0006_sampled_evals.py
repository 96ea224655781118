"""Sampled evals and breakdowns: what kind of eval a row is, its sampling, its scores.

`evalresult.kind` is `greedy` for the headline eval that every run has had (whatever its
decoding; the name is the one old rows get) and `sampled` for a pass@k / maj@k eval
(eval.sampled.*, `grpoctl eval --samples N`). A sampled row's `sampling` holds n, the ks,
its seed and how maj@k chose its subsets; `scores` its pass@k and maj@k by metric name;
`breakdown` (either kind) the accuracy by level, subject and eval.group_by's fields. The
three are JSON text, `{}` on old rows, so no old row changes meaning.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.add_column("evalresult", sa.Column("kind", sa.String, nullable=False, server_default="greedy"))
    op.add_column("evalresult", sa.Column("sampling", sa.String, nullable=False, server_default="{}"))
    op.add_column("evalresult", sa.Column("scores", sa.String, nullable=False, server_default="{}"))
    op.add_column("evalresult", sa.Column("breakdown", sa.String, nullable=False, server_default="{}"))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
