"""Checkpoint paths and output_dir become absolute.

They were stored as given, usually relative to the directory `grpoctl train` ran in,
so `--resume` from anywhere else could not find them. Which directory that was is not
recorded; the upgrade is told a candidate root (for SQLite the registry file's own
directory, which is the project root in the default layout; for PostgreSQL the
directory `grpoctl db upgrade` runs in). A run's relative paths are joined to that root
only when it is demonstrably theirs: its output_dir or one of its checkpoints exists
there. Then all of that run's paths are rewritten, deleted checkpoints' included.
Paths of other runs stay as they were (and `runs show` shows them as stored).
"""

import os

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    root = context.config.attributes.get("paths_root")
    if not root:
        return
    conn = op.get_bind()
    run = sa.table("run", sa.column("id"), sa.column("output_dir"))
    checkpoint = sa.table("checkpoint", sa.column("id"), sa.column("run_id"), sa.column("path"))
    paths: dict[int, list[tuple[int, str]]] = {}
    for ckpt_id, run_id, path in conn.execute(sa.select(checkpoint.c.id, checkpoint.c.run_id, checkpoint.c.path)):
        paths.setdefault(run_id, []).append((ckpt_id, path))

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(root, path))

    for run_id, output_dir in conn.execute(sa.select(run.c.id, run.c.output_dir)).all():
        relative = [p for p in [output_dir, *(p for _, p in paths.get(run_id, []))] if p and not os.path.isabs(p)]
        if not relative or not any(os.path.exists(absolute(p)) for p in relative):
            continue
        if output_dir and not os.path.isabs(output_dir):
            conn.execute(run.update().where(run.c.id == run_id).values(output_dir=absolute(output_dir)))
        for ckpt_id, path in paths.get(run_id, []):
            if not os.path.isabs(path):
                conn.execute(checkpoint.update().where(checkpoint.c.id == ckpt_id).values(path=absolute(path)))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
