#!/usr/bin/env bash
# A copy of the lab registry as it fills, fit to commit: the finished, diverged and failed
# runs only, without its indexes, compressed (xz) when OUT ends in .xz, as docs/results/ keeps them. scripts/run_lab_studies.sh writes the registry; commit its snapshot as the
# studies go (a session's processes, and its checkpoints, end with it).
#
#   PYTHON=/path/to/frozen/.venv/bin/python scripts/snapshot_lab_registry.sh LIVE.db docs/results/lab.db.xz
#
# LEAN=1 also leaves out the per-phase memory rows (mem/*_after_*): on the lab's CPU runs
# each is the process's resident set after a phase, three figures per phase and step, a
# quarter of a registry's compressed size; mem/peak, each step's highest, stays. The live
# registry keeps them. The tree's 40 MiB gate is why (docs/results/studies.db.xz).
#
# A run still going, or interrupted, is dropped from the copy (its rows only; no file is
# touched): its checkpoints stay on this machine, so a later session could not resume it,
# and scripts/run_lab_studies.sh starts it anew instead. PYTHON must be the grpoctl that
# runs the studies: another version's registry code could migrate the copy's schema.
set -euo pipefail
src=${1:?usage: snapshot_lab_registry.sh LIVE.db OUT.db}
out=${2:?usage: snapshot_lab_registry.sh LIVE.db OUT.db}
PYTHON=${PYTHON:-python}
tmp=$(mktemp -u "${TMPDIR:-/tmp}/lab-snapshot-XXXXXX.db")
trap 'rm -f "$tmp" "$tmp".bak-*' EXIT
sqlite3 "$src" "VACUUM INTO '$tmp'"  # a consistent copy of a registry being written
"$PYTHON" -I - "$tmp" <<'PY'  # -I: not the grpoctl of the directory this runs from
import os
import sys

from grpoctl.registry import Registry

registry = Registry(f"sqlite:///{sys.argv[1]}")
runs = registry.list_runs()
ended = ("finished", "diverged", "failed")
for run in runs:
    if run.status not in ended:
        registry.delete_run(run.id)  # rows only: the registry never touches files
        print(f"left out {run.name} ({run.status}): the runner starts it anew")
print(f"{sum(r.status in ended for r in runs)} ended runs kept")
registry.close()
if os.environ.get("LEAN") == "1":
    from grpoctl.registry.compressed import drop_phase_memory

    print(f"left out {drop_phase_memory(sys.argv[1]):,} per-phase memory rows (LEAN=1)")
# The indexes are half the compressed size and are rebuilt from the data when the copy is
# read (grpoctl/registry/compressed.py), so the snapshot leaves them out; this vacuums too.
from grpoctl.registry.compressed import strip_indexes

print(f"left out {len(strip_indexes(sys.argv[1]))} indexes, rebuilt on reading")
PY
if [[ "$out" == *.xz ]]; then
  xz -9 -T1 -c "$tmp" > "$out.part" && mv "$out.part" "$out"
else
  mv "$tmp" "$out"
fi
