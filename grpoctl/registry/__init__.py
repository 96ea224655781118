"""The experiment registry: runs, metrics, samples, evals and checkpoints in SQL.

from grpoctl.registry import Registry
registry = Registry()            # $GRPOCTL_DB, else ./registry.db
run = registry.create_run(name=..., config=..., ...)
registry.log_step(run.id, step, {"train/reward": 0.4})
"""

from grpoctl.registry.claims import ClaimLost, RegistryUnreachable
from grpoctl.registry.engine import default_db_url
from grpoctl.registry.models import (
    RUN_STATUSES,
    Checkpoint,
    EvalResult,
    Metric,
    Run,
    RunLog,
    Sample,
    Sweep,
    SweepMember,
    Tag,
)
from grpoctl.registry.open import NoRegistry
from grpoctl.registry.store import STALE_AFTER_S, Registry, effective_status

__all__ = [
    "RUN_STATUSES",
    "STALE_AFTER_S",
    "Checkpoint",
    "ClaimLost",
    "EvalResult",
    "Metric",
    "NoRegistry",
    "Registry",
    "RegistryUnreachable",
    "Run",
    "RunLog",
    "Sample",
    "Sweep",
    "SweepMember",
    "Tag",
    "default_db_url",
    "effective_status",
]
