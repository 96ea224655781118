"""Run identity v2: config hashes cover only the keys that change what a run computes.

The hash stored before this revision covered every key but name/group/variant and
logging.live, so moving checkpoints or changing the thread count made "another" run.
This rewrites each run's hash from its stored config, and each sweep member's hash from
the run that answered it. A member's own config is not stored, so a member that no run
answered cannot be rehashed; it is deleted, since no run could ever match its old hash
again (it would show as a variant missing forever). Re-running the sweep records it
again, under the new hash, and runs it.

The hash is frozen here, as grpoctl.config.config_hash defined it at this revision: a
migration must compute the same thing forever, whatever the live code becomes.
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

EXCLUDED = ("name", "group", "variant", "runtime.threads", "runtime.cache_dir", "eval.batch_size")
EXCLUDED_SECTIONS = ("checkpoint.", "logging.")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_hash_v2(config: dict) -> str:
    items = {k: v for k, v in _flatten(config).items() if k not in EXCLUDED and not k.startswith(EXCLUDED_SECTIONS)}
    return hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()[:16]


def upgrade() -> None:
    conn = op.get_bind()
    run = sa.table("run", sa.column("id"), sa.column("config"), sa.column("config_hash"))
    member = sa.table("sweepmember", sa.column("id"), sa.column("sweep_id"), sa.column("config_hash"))
    new_of_old: dict[str, str] = {}
    for run_id, config, old in conn.execute(sa.select(run.c.id, run.c.config, run.c.config_hash)).all():
        new = config_hash_v2(json.loads(config))
        new_of_old.setdefault(old, new)
        if new != old:
            conn.execute(run.update().where(run.c.id == run_id).values(config_hash=new))
    taken: set[tuple[int, str]] = set()
    rows = conn.execute(sa.select(member.c.id, member.c.sweep_id, member.c.config_hash).order_by(member.c.id)).all()
    for member_id, sweep_id, old in rows:
        new = new_of_old.get(old)
        if new is None or (sweep_id, new) in taken:
            # Two members that differed only in keys no longer hashed are one member now.
            conn.execute(member.delete().where(member.c.id == member_id))
            continue
        taken.add((sweep_id, new))
        if new != old:
            conn.execute(member.update().where(member.c.id == member_id).values(config_hash=new))


def downgrade() -> None:
    raise NotImplementedError("grpoctl migrations go forward only (see docs/registry.md)")
