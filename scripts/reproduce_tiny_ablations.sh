#!/usr/bin/env bash
# Regenerate docs/results/addition/: the tiny ablation suite (6 studies, 22 variants, 3
# seeds), one `grpoctl report` page per study, and the page of the seed's findings that
# the studies' specs declare (scripts/results_page.py experiments/pages/addition.yaml).
#
#   scripts/reproduce_tiny_ablations.sh [REGISTRY]     # default: docs/results/registry.db
#
# Sweeps are resumable: a member whose run finished is skipped, an interrupted one resumes,
# so with the committed registry this only rewrites the pages (about a minute here). From an empty
# registry it runs all 51 distinct runs (a config two studies share runs once): their
# wall times, each run on one thread, summed to 1.81 h here, so about 1 h on 2 cores
# with PARALLEL=2. Never in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
DB=${1:-docs/results/registry.db}
SEEDS=${SEEDS:-0,1,2}
PARALLEL=${PARALLEL:-2}
STUDIES=(tiny-lr-sweep tiny-baseline-ablation tiny-length-normalization tiny-std-normalization
         tiny-off-policy tiny-sft-init)
start=$(date +%s)
mkdir -p "$(dirname "$DB")"
for study in "${STUDIES[@]}"; do
  echo "=== $study"
  grpoctl sweep "experiments/$study.yaml" --seeds "$SEEDS" --parallel "$PARALLEL" --db "$DB"
done
python scripts/results_page.py experiments/pages/addition.yaml --db "$DB" --out docs/results/addition
echo "regenerated in $(( $(date +%s) - start )) s"
