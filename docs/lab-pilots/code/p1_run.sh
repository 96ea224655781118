#!/bin/bash
# THROWAWAY (round 2, P1): baseline to plateau (<=300 steps) and three 100-step probes, 8 prompts x 8, on core 1.
# usage: p1_run.sh MODEL_DIR
M=$1
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 GRPOCTL_DB=/work/pilots/registry.db
P=/work/main/.venv/bin/python
B="rollout_batch_size=64 train_batch_size=64 gradient_accumulation_steps=1"
$P p1_watch.py r2p1_base 60 -- r2/lab_p1.yaml model.path=$M steps=300 $B > logs/r2p1_base.watch 2>&1 &
PILOT_SHUFFLE=1 $P p1_watch.py r2p1_shuffle 0 -- r2/lab_p1.yaml model.path=$M steps=100 $B > logs/r2p1_shuffle.watch 2>&1 &
wait; exit 0  # round 2: P0 was NO-GO; only the baseline and the shuffled control were run, as diagnostics
$P p1_watch.py r2p1_lr3x 0 -- r2/lab_p1.yaml model.path=$M steps=100 lr=1e-3 $B > logs/r2p1_lr3x.watch 2>&1 &
$P p1_watch.py r2p1_nobase 0 -- r2/lab_p1.yaml model.path=$M steps=100 loss_type=no_baseline $B > logs/r2p1_nobase.watch 2>&1 &
wait; exit 0  # round 2: P0 was NO-GO; only the baseline and the shuffled control were run, as diagnostics
