"""The registry as grpoctl created it before migrations existed (models.py at db81e36).

Frozen here, not built from models.py: later revisions change the models, and this one
must keep creating exactly the schema that registries written by that code have, so
that an unstamped registry with these tables is recognised as this revision.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def _dt(name: str, nullable: bool = False) -> sa.Column:
    # SQLModel's aware-datetime type: TIMESTAMP WITH TIME ZONE on PostgreSQL, DATETIME on SQLite.
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    text = sa.String
    op.create_table(
        "run",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", text, nullable=False),
        sa.Column("group", text),
        sa.Column("variant", text),
        sa.Column("status", text, nullable=False),
        sa.Column("config", text, nullable=False),
        sa.Column("config_diff", text, nullable=False),
        sa.Column("config_hash", text, nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("host", text, nullable=False),
        sa.Column("device", text, nullable=False),
        sa.Column("version", text, nullable=False),
        sa.Column("git_commit", text),
        sa.Column("output_dir", text),
        sa.Column("parent", text),
        sa.Column("total_steps", sa.Integer, nullable=False),
        sa.Column("last_step", sa.Integer, nullable=False),
        _dt("created_at"),
        _dt("finished_at", nullable=True),
        _dt("heartbeat_at"),
        sa.Column("pid", sa.Integer),
        sa.Column("error", text),
    )
    op.create_index("ix_run_config_hash", "run", ["config_hash"])
    op.create_index("ix_run_name", "run", ["name"], unique=True)
    op.create_index("ix_run_status", "run", ["status"])
    op.create_index("ix_run_group", "run", ["group"])

    op.create_table(
        "sweep",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", text, nullable=False),
        sa.Column("kind", text, nullable=False),
        sa.Column("spec", text, nullable=False),
        _dt("created_at"),
    )
    op.create_index("ix_sweep_name", "sweep", ["name"], unique=True)

    op.create_table(
        "metric",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("opt_step", sa.Integer),
        sa.Column("name", text, nullable=False),
        sa.Column("value", sa.Float),
    )
    op.create_index("ix_metric_run_name_step", "metric", ["run_id", "name", "step"])

    op.create_table(
        "checkpoint",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("path", text, nullable=False),
        sa.Column("eval_accuracy", sa.Float),
        _dt("created_at"),
        sa.Column("deleted", sa.Boolean, nullable=False),
    )
    op.create_index("ix_checkpoint_run_id", "checkpoint", ["run_id"])

    op.create_table(
        "evalresult",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id")),
        sa.Column("step", sa.Integer),
        sa.Column("checkpoint_path", text),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("accuracy", sa.Float, nullable=False),
        sa.Column("format_rate", sa.Float, nullable=False),
        sa.Column("mean_response_length", sa.Float, nullable=False),
        sa.Column("data_source", text, nullable=False),
        sa.Column("data_hash", text, nullable=False),
        sa.Column("subset_hash", text, nullable=False),
        sa.Column("template", text, nullable=False),
        sa.Column("template_hash", text, nullable=False),
        sa.Column("decoding", text, nullable=False),
        sa.Column("grader", text, nullable=False),
        sa.Column("grading_timeouts", sa.Integer, nullable=False),
        _dt("created_at"),
    )
    op.create_index("ix_evalresult_run_id", "evalresult", ["run_id"])

    op.create_table(
        "sample",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("kind", text, nullable=False),
        sa.Column("prompt", text, nullable=False),
        sa.Column("response", text, nullable=False),
        sa.Column("ground_truth", text, nullable=False),
        sa.Column("reward", sa.Float, nullable=False),
        sa.Column("format_reward", sa.Float, nullable=False),
        sa.Column("answer_reward", sa.Float, nullable=False),
    )
    op.create_index("ix_sample_run_id", "sample", ["run_id"])

    op.create_table(
        "tag",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("run.id"), nullable=False),
        sa.Column("tag", text, nullable=False),
        sa.UniqueConstraint("run_id", "tag"),
    )
    op.create_index("ix_tag_tag", "tag", ["tag"])
    op.create_index("ix_tag_run_id", "tag", ["run_id"])

    op.create_table(
        "sweepmember",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweep.id"), nullable=False),
        sa.Column("config_hash", text, nullable=False),
        sa.Column("variant", text, nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.UniqueConstraint("sweep_id", "config_hash"),
    )
    op.create_index("ix_sweepmember_sweep_id", "sweepmember", ["sweep_id"])


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
