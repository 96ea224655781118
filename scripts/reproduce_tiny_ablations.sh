#!/usr/bin/env bash
# Regenerate the results pages from the committed registries, running what is missing
# first: the addition page (docs/results/addition/, the tiny suite: 6 studies, 22
# variants, 3 seeds, into docs/results/registry.db), the lab's page (docs/results/, the
# seed's seven studies on the lab's second round, issue 42, into docs/results/studies.db),
# the first round's page (docs/results/first-lab/, issue 21, docs/results/lab.db), the lab's
# knob page (docs/results/knobs/, issue 22's three studies, into docs/results/lab-knobs.db)
# and its pass@k page (docs/results/pass-at-k/, issue 23, into docs/results/lab-pass-at-k.db).
#
#   scripts/reproduce_tiny_ablations.sh [all|pages|lab|addition]
#
#   all       (the default) run or resume both suites, then write both pages
#   pages     write both pages from the registries as they are; run nothing
#   lab       run or resume the lab's studies (scripts/run_lab_studies.sh seven, knobs,
#             then studies: in order, on one core, the lr winner checked) and the pass@k
#             runs, then write the four lab pages
#   addition  run or resume the tiny suite, then write the addition page
#
# Sweeps are resumable: a member whose run finished is skipped (runs are found by config
# hash, so an arm two studies share runs once), an interrupted one resumes. With the
# committed registries this only rewrites the pages. From an empty registry the tiny
# suite is 51 distinct runs (their wall times, each on one thread, summed to 1.81 h here:
# about 1 h on 2 cores with PARALLEL=2), and the lab's is 123 runs (2.7 CPU-hours measured)
# and 21 knob runs (16 CPU-minutes) and 3 pass@k runs (3 CPU-minutes), on one core
# (docs/lab-studies-cost.md). Never in CI.
#
# The committed registries are compressed (docs/results/*.db.xz) and read as they are;
# runs go to a live copy of each under outputs/registries/ (made from the committed one
# the first time), and the pages are then written from it. Commit a live copy with
# scripts/snapshot_lab_registry.sh LIVE.db docs/results/NAME.db.xz.
#
# Environment: ADDITION_DB (default docs/results/registry.db.xz), LAB_DB (default
# docs/results/lab.db.xz), STUDIES_DB (default docs/results/studies.db.xz), KNOBS_DB (default docs/results/lab-knobs.db.xz), PASS_AT_K_DB
# (default docs/results/lab-pass-at-k.db.xz), BREVITY_DB (the reward plugin's example, default
# docs/results/lab-brevity.db.xz: its report is rewritten, its runs never re-run), SEEDS (the tiny suite's, default 0,1,2),
# PARALLEL (the tiny suite's, default 2), LAB_CORE (passed on to
# scripts/run_lab_studies.sh), GRPOCTL and PYTHON (the commands; default the checkout's
# .venv when it has one).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case "$what" in
  all|pages|lab|addition) ;;
  *) echo "usage: scripts/reproduce_tiny_ablations.sh [all|pages|lab|addition] (got '$what')" >&2; exit 2 ;;
esac
if [[ -z "${GRPOCTL:-}" ]]; then
  if [[ -x .venv/bin/grpoctl ]]; then GRPOCTL=.venv/bin/grpoctl; else GRPOCTL=grpoctl; fi
fi
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
export GRPOCTL PYTHON
ADDITION_DB=${ADDITION_DB:-docs/results/registry.db.xz}
LAB_DB=${LAB_DB:-docs/results/lab.db.xz}
STUDIES_DB=${STUDIES_DB:-docs/results/studies.db.xz}
KNOBS_DB=${KNOBS_DB:-docs/results/lab-knobs.db.xz}
PASS_AT_K_DB=${PASS_AT_K_DB:-docs/results/lab-pass-at-k.db.xz}
BREVITY_DB=${BREVITY_DB:-docs/results/lab-brevity.db.xz}
SEEDS=${SEEDS:-0,1,2}
PARALLEL=${PARALLEL:-2}
STUDIES=(tiny-lr-sweep tiny-baseline-ablation tiny-length-normalization tiny-std-normalization
         tiny-off-policy tiny-sft-init)
start=$(date +%s)

live() {  # live DB: the registry runs may write: DB itself, or a .db.xz's live copy
  if [[ $1 != *.xz ]]; then echo "$1"; return; fi
  local copy
  copy=outputs/registries/$(basename "${1%.xz}")
  mkdir -p outputs/registries
  [[ -f $copy ]] || { xz -dkc "$1" > "$copy.part" && mv "$copy.part" "$copy"; }
  echo "$copy"
}
addition_runs() {
  ADDITION_DB=$(live "$ADDITION_DB")
  mkdir -p "$(dirname "$ADDITION_DB")"
  for study in "${STUDIES[@]}"; do
    echo "=== $study"
    "$GRPOCTL" sweep "experiments/$study.yaml" --seeds "$SEEDS" --parallel "$PARALLEL" --db "$ADDITION_DB"
  done
}
addition_page() {
  "$PYTHON" scripts/results_page.py experiments/pages/addition.yaml --db "$ADDITION_DB" --out docs/results/addition
}
lab_runs() {
  LAB_DB=$(live "$LAB_DB") KNOBS_DB=$(live "$KNOBS_DB") PASS_AT_K_DB=$(live "$PASS_AT_K_DB")
  STUDIES_DB=$(live "$STUDIES_DB")
  LAB_DB="$LAB_DB" scripts/run_lab_studies.sh seven
  LAB_DB="$KNOBS_DB" scripts/run_lab_studies.sh knobs
  LAB_DB="$STUDIES_DB" scripts/run_lab_studies.sh studies
  taskset -c "${LAB_CORE:-1}" "$GRPOCTL" sweep experiments/lab-pass-at-k.yaml --parallel 1 --db "$PASS_AT_K_DB"
}
lab_page() {
  for db in "$LAB_DB" "$STUDIES_DB" "$KNOBS_DB" "$PASS_AT_K_DB"; do
    if [[ ! -f "$db" ]]; then
      echo "no lab registry at $db: run 'scripts/reproduce_tiny_ablations.sh lab' first" >&2
      return 2
    fi
  done
  if [[ -f "$BREVITY_DB" ]]; then  # the reward plugin's worked example (its runs are not re-run here)
    "$GRPOCTL" report lab-brevity --db "$BREVITY_DB" -o docs/results/brevity
  fi
  "$PYTHON" scripts/results_page.py experiments/pages/studies.yaml --db "$STUDIES_DB" --out docs/results
  "$PYTHON" scripts/results_page.py experiments/pages/lab.yaml --db "$LAB_DB" --out docs/results/first-lab
  "$PYTHON" scripts/results_page.py experiments/pages/lab-knobs.yaml --db "$KNOBS_DB" --out docs/results/knobs
  "$PYTHON" scripts/pass_at_k_page.py --db "$PASS_AT_K_DB" --out docs/results/pass-at-k
}

case "$what" in
  all) addition_runs; addition_page; lab_runs; lab_page ;;
  pages) addition_page; lab_page ;;
  lab) lab_runs; lab_page ;;
  addition) addition_runs; addition_page ;;
esac
echo "regenerated ($what) in $(( $(date +%s) - start )) s"
