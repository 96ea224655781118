"""The experiment registry: runs, metrics, samples, evals and checkpoints in SQL.

from grpoctl.registry import Registry
registry = Registry()            # $GRPOCTL_DB, else ./registry.db
run = registry.create_run(name=..., config=..., ...)
registry.log_step(run.id, step, {"train/reward": 0.4})
"""

import os
from contextlib import contextmanager


@contextmanager
def _without_pydantic_plugins():
    """pydantic reads every installed distribution's entry points for plugins the first
    time a model class is built: 15 ms of a 0.5 s `grpoctl runs list`. The registry's
    rows need no validation plugin, so their classes are built without that scan (as
    typer builds its own adapters); a model built later still finds the user's plugins,
    since pydantic caches nothing while they are disabled."""
    saved = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = saved


with _without_pydantic_plugins():
    from grpoctl.registry.claims import ClaimLost, RegistryUnreachable
    from grpoctl.registry.engine import default_db_url
    from grpoctl.registry.models import Checkpoint, EvalResult, Metric, Run, Sample, Sweep, SweepMember, Tag
    from grpoctl.registry.open import NoRegistry
    from grpoctl.registry.store import STALE_AFTER_S, Registry, effective_status

__all__ = [
    "STALE_AFTER_S",
    "Checkpoint",
    "ClaimLost",
    "EvalResult",
    "Metric",
    "NoRegistry",
    "Registry",
    "RegistryUnreachable",
    "Run",
    "Sample",
    "Sweep",
    "SweepMember",
    "Tag",
    "default_db_url",
    "effective_status",
]
