#!/usr/bin/env bash
# Run, or resume, the lab's studies one after another, on one core: the seven of issue 21
# (`seven`, the default), or the three knob studies of issue 22, queued after them, into
# their own registry (`knobs`), or issue 40's five recipe studies into that registry too
# (`recipe`), or issue 42's seven on the new instrument (`studies`: experiments/studies/,
# registry studies.db, whose lr rule is scripts/lr_winner.py's). The studies write a live
# registry under outputs/registries/, started from the committed one (docs/results/lab.db.xz,
# lab-knobs.db.xz, studies.db.xz) when it is not there yet; commit it compressed with
# scripts/snapshot_lab_registry.sh.
#
#   scripts/run_lab_studies.sh [seven|knobs|recipe|studies]   # run what is left of the suite, in order
#   nohup scripts/run_lab_studies.sh > outputs/lab-studies.log 2>&1 &
#   kill -TERM "$(cat outputs/lab-studies.pid)"   # pause: members checkpoint, end `interrupted`
#   scripts/run_lab_studies.sh              # ... and resume them
#
# The order is the cost table's (docs/lab-studies-cost.md): the lr study first, because the
# others take its winner. Once it is done this script applies the winner rule that
# lab-lr-sweep.yaml states (highest mean over seeds 0-2 of each run's last-3 eval mean; an
# exact tie goes to the lower lr). It goes on only if every other study's spec already
# has that lr. Otherwise it stops, and the specs are re-pointed (`optimizer.lr` in their
# `common:`) and committed before it is run again.
#
# Resuming is `grpoctl sweep`'s own. A member whose run finished is skipped, in any study,
# since runs are found by config hash: the arm studies share runs once. An interrupted or
# stale run resumes from its checkpoint. A failed or diverged one is left alone (a diverged
# lr=3.3e-4 is a result). Failures stop this script: read the logs under
# outputs/sweeps/STUDY/, then rerun with RETRY_FAILED=1.
#
# Pinned: every sweep and its trainers run under `taskset -c $LAB_CORE` (default 1), one
# member at a time (`--parallel 1`), one torch thread each, so the other core stays free.
# To pause for a timing benchmark or a clean-clone CI run, send SIGTERM to this script
# (its pid is in outputs/lab-studies.pid; the knobs suite's in outputs/lab-studies-knobs.pid). It forwards the signal to the running sweep.
# The sweep interrupts its trainer: it finishes its step, checkpoints and ends
# `interrupted`, within INTERRUPT_GRACE_S (120 s). A second SIGTERM stops it at once.
# The script then exits 130 without starting the next study. Run it again to resume.
#
# The knob studies take the lr study's winner too: their specs are checked against the
# lr study (LR_DB) before each one starts, as the seven's are.
#
# Environment: LAB_DB (the live registry, default outputs/registries/lab.db for `seven`,
# outputs/registries/lab-knobs.db for `knobs`), LR_DB (where the lr study is: the live
# lab.db for `seven`, the committed docs/results/lab.db.xz for `knobs`), LAB_CORE (default 1),
# RETRY_FAILED=1 (rerun failed and diverged members as new runs), GRPOCTL (the command,
# default .venv/bin/grpoctl when it exists, else grpoctl).
set -uo pipefail
cd "$(dirname "$0")/.."

SUITE=${1:-seven}
CORE=${LAB_CORE:-1}
if [[ -z "${GRPOCTL:-}" ]]; then
  if [[ -x .venv/bin/grpoctl ]]; then GRPOCTL=.venv/bin/grpoctl; else GRPOCTL=grpoctl; fi
fi
PYTHON=${PYTHON:-$(dirname "$(command -v "$GRPOCTL")")/python}
[[ -x "$PYTHON" ]] || PYTHON=python3
# each suite's studies and their cost-table estimates in CPU-minutes (docs/lab-studies-cost.md), in run order
case "$SUITE" in
  seven)
    DB=${LAB_DB:-outputs/registries/lab.db}
    LR_DB=${LR_DB:-$DB}
    STUDIES=(lab-lr-sweep lab-baseline-ablation lab-length-normalization lab-std-normalization
             lab-off-policy lab-off-policy-full lab-prompt lab-sft-init)
    PAGE=experiments/pages/lab.yaml
    declare -A ESTIMATE_MIN=([lab-lr-sweep]=24 [lab-baseline-ablation]=10 [lab-length-normalization]=36
                             [lab-std-normalization]=10 [lab-off-policy]=80 [lab-off-policy-full]=30
                             [lab-prompt]=5 [lab-sft-init]=18) ;;
  knobs)
    DB=${LAB_DB:-outputs/registries/lab-knobs.db}
    LR_DB=${LR_DB:-docs/results/lab.db.xz}
    STUDIES=(lab-overlong lab-dynamic-sampling lab-entropy-bonus)
    PAGE=experiments/pages/lab-knobs.yaml
    declare -A ESTIMATE_MIN=([lab-overlong]=15 [lab-dynamic-sampling]=12 [lab-entropy-bonus]=15) ;;
  recipe)  # issue 40's five, into the knobs page's registry (its plain arm is reused)
    DB=${LAB_DB:-outputs/registries/lab-knobs.db}
    LR_DB=${LR_DB:-docs/results/lab.db.xz}
    STUDIES=(lab-group-shape lab-kl lab-curriculum lab-cispo lab-entropy-strong)
    PAGE=experiments/pages/lab-knobs.yaml
    declare -A ESTIMATE_MIN=([lab-group-shape]=5 [lab-kl]=7 [lab-curriculum]=11 [lab-cispo]=16
                             [lab-entropy-strong]=27) ;;
  studies)  # issue 42: the seven again, on the new instrument, into their own registry
    DB=${LAB_DB:-outputs/registries/studies.db}
    STUDIES=(studies/lr-select studies/lr studies/baseline studies/length-normalization
             studies/off-policy studies/std-normalization studies/prompt studies/sft-init)
    PAGE=experiments/pages/studies.yaml
    declare -A ESTIMATE_MIN=([studies/lr-select]=29 [studies/lr]=19 [studies/baseline]=18
                             [studies/length-normalization]=16 [studies/off-policy]=45
                             [studies/std-normalization]=67 [studies/prompt]=10 [studies/sft-init]=21) ;;
  *)
    echo "usage: scripts/run_lab_studies.sh [seven|knobs|recipe|studies] (got '$SUITE')" >&2
    exit 2 ;;
esac
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1  # one thread per trainer (grpoctl also picks 1 for the lab's model)

# The runner's own files (lock, pid, CPU times): one set per suite, so the two suites can
# run at once, each on its own core (LAB_CORE).
STATE=outputs/lab-studies
[[ $SUITE == seven ]] || STATE=outputs/lab-studies-$SUITE
mkdir -p outputs "$(dirname "$DB")"
committed=docs/results/$(basename "$DB").xz
if [[ ! -f "$DB" && -f "$committed" ]]; then
  xz -dkc "$committed" > "$DB.part" && mv "$DB.part" "$DB"  # the live registry starts as the committed one
  echo "started $DB from $committed"
fi
exec 9> "$STATE.lock"
if ! flock -n 9; then
  echo "another scripts/run_lab_studies.sh holds $STATE.lock (pid $(cat "$STATE.pid" 2>/dev/null)); not starting" >&2
  exit 1
fi
echo $$ > "$STATE.pid"

sweep_pid=""
stopping=0
forward() {  # SIGTERM/SIGINT/SIGHUP: pass it on to the sweep, which interrupts its trainer
  stopping=1
  if [[ -n "$sweep_pid" ]] && kill -0 "$sweep_pid" 2>/dev/null; then
    echo "$(date +%H:%M:%S) signal: interrupting the running sweep (pid $sweep_pid); its member checkpoints and ends interrupted"
    kill -TERM "$sweep_pid" 2>/dev/null
  fi
}
trap forward TERM INT HUP

children_cpu() {  # CPU_S: CPU seconds (user + sys) of every child waited for so far
  # the builtin in this shell, not in $(...) or a pipe, which would ask a subshell
  times > "$STATE.times"
  CPU_S=$(awk 'NR == 2 {
    n = split($0, t, " "); s = 0
    for (i = 1; i <= n; i++) { split(t[i], p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
    printf "%.0f", s }' "$STATE.times")
}

# The lr study's winner by the rule in lab-lr-sweep.yaml, checked against every other
# spec's lr. Exit 0: they agree; 3: re-point the specs first; 4: the lr study is unfinished.
read -r -d '' WINNER_PY <<'PY'
import json, sys, yaml

table = json.loads(sys.stdin.read())
spec = yaml.safe_load(open("experiments/lab-lr-sweep.yaml"))
lrs = {label: float(diff["optimizer.lr"]) for label, diff in spec["variants"].items()}
ENDED = ("finished", "diverged")


def ended(status):  # "finished", or a fold's "2 finished, 1 diverged"
    return all(part.split()[-1] in ENDED for part in status.split(", "))


scores = {}
for row in table["rows"]:
    if not ended(row["status"]) or sorted(row["seeds"]) != [0, 1, 2] or row["acc_last_k"] is None:
        print(f"lr study not finished: {row['variant']} is {row['status']} over seeds {row['seeds']}")
        sys.exit(4)
    scores[row["variant"]] = row["acc_last_k"]
if set(scores) != set(lrs):
    print(f"lr study not finished: rows {sorted(scores)} against variants {sorted(lrs)}")
    sys.exit(4)
# the highest mean over seeds 0-2 of each run's last-3 eval mean; an exact tie goes to the lower lr
winner = max(scores, key=lambda v: (scores[v], -lrs[v]))
print("lr study, mean over seeds 0-2 of each run's last-3 eval mean:")
for v in sorted(scores, key=lambda v: lrs[v]):
    print(f"  {v:10s} {scores[v]:.4f}" + ("   <- winner" if v == winner else ""))
wrong = []
for name in sys.argv[1:]:
    other = yaml.safe_load(open(f"experiments/{name}.yaml"))
    lr = float((other.get("common") or {}).get("optimizer.lr", "nan"))
    if lr != lrs[winner]:
        wrong.append(f"{name} ({lr:g})")
if wrong:
    print(
        f"the winner is {winner}: set optimizer.lr: {lrs[winner]:g} in the common: of "
        + ", ".join(wrong)
        + ", commit, and run this script again (lab-lr-sweep.yaml states the rule)"
    )
    sys.exit(3)
print(f"every other study runs at the winner's lr, {lrs[winner]:g}")
PY
check_lr_winner() {
  local table
  if ! table=$("$GRPOCTL" compare lab-lr-sweep --format json --db "$LR_DB" 2> "$STATE-compare.err"); then
    echo "lr study: $(cat "$STATE-compare.err")" >&2
    return 4
  fi
  local others=()
  for s in "${STUDIES[@]}"; do [[ $s == lab-lr-sweep ]] || others+=("$s"); done
  "$PYTHON" -c "$WINNER_PY" "${others[@]}" <<< "$table"
}

retry=()
[[ "${RETRY_FAILED:-0}" == 1 ]] && retry=(--retry-failed)
start=$(date +%s)
total_cpu=0
for i in "${!STUDIES[@]}"; do
  study=${STUDIES[$i]}
  spec="experiments/$study.yaml"
  if [[ $SUITE == studies ]]; then
    if [[ $study != studies/lr-select ]]; then  # lr-select.yaml's rule, and the spec at its winner
      "$PYTHON" scripts/lr_winner.py --db "$DB" --check "$spec" | tail -1
      rc=${PIPESTATUS[0]}
      if (( rc != 0 )); then exit "$rc"; fi
    fi
  elif [[ $study != lab-lr-sweep ]]; then
    check_lr_winner
    rc=$?
    if (( rc != 0 )); then exit "$rc"; fi
  fi
  # What is left of it: the dry run finds runs by config hash, so the arms another study
  # already finished show as skip even before this study is recorded.
  plan=$("$GRPOCTL" sweep "$spec" --dry-run --db "$DB" 2>&1) || { echo "$plan" >&2; exit 2; }
  left=$(grep -cE '^  (new|resume|retry) ' <<< "$plan")
  done_=$(grep -cE '^  skip ' <<< "$plan")
  echo "=== $(date +%H:%M:%S) [$((i + 1))/${#STUDIES[@]}] $study: $(head -1 <<< "$plan" | sed 's/^ablation [^:]*: //'), $done_ skipped, $left to run or resume (estimate for the whole study: ${ESTIMATE_MIN[$study]} CPU-min)"
  if (( stopping )); then echo "paused before $study started; run the script again to resume"; exit 130; fi
  children_cpu
  cpu_before=$CPU_S
  study_start=$(date +%s)
  taskset -c "$CORE" "$GRPOCTL" sweep "$spec" --parallel 1 --db "$DB" ${retry[@]+"${retry[@]}"} &
  sweep_pid=$!
  while true; do  # `wait` returns early when a trapped signal arrives: wait again until the sweep is gone
    wait "$sweep_pid"
    rc=$?
    kill -0 "$sweep_pid" 2>/dev/null || break
  done
  sweep_pid=""
  children_cpu
  cpu=$(( CPU_S - cpu_before ))
  total_cpu=$(( total_cpu + cpu ))
  echo "=== $(date +%H:%M:%S) $study: exit $rc, $(( $(date +%s) - study_start )) s wall, $cpu CPU-s (suite so far: $total_cpu CPU-s this invocation)"
  if (( stopping || rc == 130 )); then
    echo "paused: $study's running member ended interrupted; run scripts/run_lab_studies.sh again to resume"
    exit 130
  fi
  if (( rc != 0 )); then
    echo "$study: exit $rc. Read the logs in outputs/sweeps/$study/, then RETRY_FAILED=1 scripts/run_lab_studies.sh" >&2
    exit "$rc"
  fi
done
echo "=== all ${#STUDIES[@]} studies done in $(( $(date +%s) - start )) s wall, $total_cpu CPU-s this invocation"
echo "the page: python scripts/results_page.py $PAGE"
