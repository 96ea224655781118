"""Every run in docs/results/ recomputes to the config_hash it was recorded with.

The results pages rest on those runs; a change to the config tree, its defaults or
the hash (run_identity.py) that moved any of them would orphan the committed registry
(sweeps find their members by hash, `--resume` checks it). Checked both on the stored
config as it is and after loading it back through the config tree (what `--resume`
and `--from` do).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from grpoctl.config import from_dict
from grpoctl.run_identity import config_hash

# each committed registry, and how many runs it holds at least: the addition task's six
# studies, the lab's seven studies (all 123 runs), the lab's three knob studies (issue 22)
# and its pass@k runs (issue 23), each committed as NAME.xz. Not lab-brevity.db: a plugin's identity is its file's
# bytes at the absolute path its sweep recorded, which only the machine that ran it has.
REGISTRIES = {"registry.db": 51, "lab.db": 123, "lab-knobs.db": 21, "lab-pass-at-k.db": 3}


@pytest.mark.parametrize("registry, at_least", REGISTRIES.items())
def test_every_results_run_recomputes_to_its_stored_hash(registry, at_least, committed_registry):
    # read-only: the stored rows as committed, whatever schema this grpoctl migrates to
    with sqlite3.connect(f"file:{committed_registry(registry)}?mode=ro", uri=True) as conn:
        runs = conn.execute("SELECT name, config, config_hash FROM run ORDER BY id").fetchall()
    assert len(runs) >= at_least
    moved = []
    for name, config, stored in runs:
        plain = json.loads(config)
        if config_hash(plain) != stored or config_hash(from_dict(plain)) != stored:
            moved.append(name)
    assert not moved, f"{len(moved)} runs no longer hash to their stored config_hash: {moved[:5]}"
