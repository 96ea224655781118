"""The registry's tables: what grpoctl remembers about every run.

Metrics are stored in long form (one row per run, step, name) so that any new metric
lands without a schema change, and so `compare` can aggregate them in SQL. Names are
namespaced: `train/*`, `eval/*`, `time/*`, `mem/*`. A "step" is a GRPO step (one rollout
batch); figures taken per optimizer step carry that index in `opt_step`, and their
per-GRPO-step summary is stored with `opt_step = NULL`.

The tables are created and changed by the migrations in `migrations/versions/` (see
schema.py), never by `create_all`: a change here needs a new revision there, and
tests/test_migrations.py checks that the two agree.

This module must not import torch: commands that only read the registry start fast.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text, true
from sqlmodel import Field, Index, SQLModel, UniqueConstraint

from grpoctl.rules import RUN_STATUSES  # noqa: F401  (the statuses a run row may hold)

EVAL_KINDS = ("greedy", "sampled")  # EvalResult.kind: the headline eval, and pass@k / maj@k


def utcnow() -> datetime:
    # Aware, in UTC: SQLModel's datetime columns refuse naive datetimes, and they read
    # back as aware UTC datetimes on every backend (SQLite stores them without offset).
    return datetime.now(UTC)


def stored_text(value):
    """Text as the registry stores it. PostgreSQL text cannot hold NUL, which a random or
    broken model can generate: it becomes U+FFFD, on every backend, so both read back alike."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


class Run(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    group: str | None = Field(default=None, index=True)  # sweep or ablation name
    variant: str | None = None  # the variant's label inside its group (e.g. "lr=3e-05")
    status: str = Field(default="running", index=True)  # one of RUN_STATUSES
    config: str  # full resolved config, JSON
    config_diff: str  # diff from the defaults, JSON (nested dict)
    config_hash: str = Field(index=True)  # hash of the resolved config minus name/group
    seed: int = 0
    host: str = ""
    device: str = ""  # "cpu" or the GPU's name
    version: str = ""  # grpoctl version
    git_commit: str | None = None
    output_dir: str | None = None  # where checkpoints go
    parent: str | None = None  # run this one was started `--from`
    total_steps: int = 0  # configured number of GRPO steps
    last_step: int = -1  # last GRPO step fully committed
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    heartbeat_at: datetime = Field(default_factory=utcnow)
    pid: int | None = None  # of the training process, so --resume can tell a dead run from a live one
    error: str | None = None
    # The one process allowed to write the run's steps (see claims.py): a random token,
    # who holds it, and until when (renewed by every commit and heartbeat).
    claim_token: str | None = None
    claim_host: str | None = None
    claim_pid: int | None = None
    claim_expires_at: datetime | None = None
    # Set by `grpoctl runs stop`; the trainer's heartbeat sees it and stops as on SIGTERM.
    stop_requested_at: datetime | None = None
    # JSON: the train and eval data's hashes, problem counts and overlong drops
    # (RunData.fingerprint). Migration 0007; `{}` on older runs.
    data_fingerprint: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})


class Metric(SQLModel, table=True):
    __table_args__ = (
        Index("ix_metric_run_name_step", "run_id", "name", "step"),
        # A step's metric is written once, ever (opt_step NULL counts as one value).
        Index("ux_metric_step_key", "run_id", "step", text("coalesce(opt_step, -1)"), "name", unique=True),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    step: int
    opt_step: int | None = None
    name: str
    # NULL means NaN: SQLite stores a NaN REAL as NULL, so NaN is written as NULL on every
    # backend and read back as float("nan") (None values are skipped, never stored).
    value: float | None = None


class Checkpoint(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    step: int
    path: str
    eval_accuracy: float | None = None
    created_at: datetime = Field(default_factory=utcnow)
    deleted: bool = False  # removed from disk by keep_last / keep_best retention


class EvalResult(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="run.id", index=True)
    step: int | None = None
    checkpoint_path: str | None = None
    n: int
    accuracy: float
    format_rate: float
    mean_response_length: float
    # What makes two evals comparable; compare warns when these differ.
    data_source: str = ""
    data_hash: str = ""
    subset_hash: str = ""
    template: str = ""
    template_hash: str = ""
    decoding: str = "{}"  # JSON: temperature, top_p, max_tokens, stop, greedy
    grader: str = ""  # e.g. "math-verify 0.9.0"
    grading_timeouts: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    # "greedy": the headline eval (eval.*, whatever its decoding); "sampled": pass@k and
    # maj@k from eval.sampled.n samples per problem (evals/sampled.py). Migration 0006.
    kind: str = Field(default=EVAL_KINDS[0], sa_column_kwargs={"server_default": EVAL_KINDS[0]})
    sampling: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})  # JSON: n, k, seed, subsets
    scores: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})  # JSON: eval/pass@k, eval/maj@k
    breakdown: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})  # JSON: field -> value -> figures
    # Which eval set (eval.sets) the row is of: "" for a run's one unnamed set (every run
    # before 0008, and any without eval.sets); `headline` marks the run's headline set, the
    # first, whose rows make its accuracy curve. Migration 0008.
    eval_set: str = Field(default="", sa_column_kwargs={"server_default": ""})
    headline: bool = Field(default=True, sa_column_kwargs={"server_default": true()})
    # Right samples per problem, in the order of the problems' ids (registry/outcomes.py);
    # NULL: not recorded (every row before 0009). Migration 0009.
    outcomes: str | None = None


# The EvalResult fields that make two evals comparable (`compare` warns when they differ).
COMPARABLE_EVAL_FIELDS = ("decoding", "subset_hash", "data_hash", "template_hash", "grader")


class Sample(SQLModel, table=True):
    """A few completions per step, so a run can be read, not just plotted."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    step: int
    kind: str = "train"  # "train" or "eval"
    prompt: str
    response: str
    ground_truth: str
    reward: float
    format_reward: float
    answer_reward: float


class Tag(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("run_id", "tag"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    tag: str = Field(index=True)


class Sweep(SQLModel, table=True):
    """A sweep or ablation. Its members are known by config hash, not by run name."""

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    kind: str  # "sweep" (one parameter) or "ablation" (named variants)
    spec: str  # JSON: what was asked for
    created_at: datetime = Field(default_factory=utcnow)
    # JSON: a `--seeds auto` sweep's stage, pilot, re-estimate and final seeds; {} for fixed seeds. Migration 0010.
    design: str = Field(default="{}", sa_column_kwargs={"server_default": "{}"})


class SweepMember(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("sweep_id", "config_hash"),)

    id: int | None = Field(default=None, primary_key=True)
    sweep_id: int = Field(foreign_key="sweep.id", index=True)
    config_hash: str
    variant: str  # label, e.g. "lr=3e-05" or "no_baseline"
    seed: int = 0


class RunLog(SQLModel, table=True):
    """What a sweep member's trainer printed, a chunk of lines per row, in order of id.

    Keyed by run name, not id: the first lines come before the trainer creates its run,
    and a trainer refused by its checks never does."""

    id: int | None = Field(default=None, primary_key=True)
    run_name: str = Field(index=True)
    host: str  # where the trainer ran
    created_at: datetime = Field(default_factory=utcnow)
    text: str
