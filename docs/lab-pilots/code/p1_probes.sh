#!/bin/bash
# THROWAWAY (round 2): the lr x3.3 and no_baseline probes, 100 steps, 8 prompts x 8, on core 1 (diagnostics; P0 was NO-GO).
M=$1
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 GRPOCTL_DB=/work/pilots/registry.db
P="taskset -c 1 /work/main/.venv/bin/python"
B="rollout_batch_size=64 train_batch_size=64 gradient_accumulation_steps=1"
$P p1_watch.py r2p1_lr3x 0 -- r2/lab_p1.yaml model.path=$M steps=100 lr=1e-3 $B > logs/r2p1_lr3x.watch 2>&1 &
$P p1_watch.py r2p1_nobase 0 -- r2/lab_p1.yaml model.path=$M steps=100 loss_type=no_baseline $B > logs/r2p1_nobase.watch 2>&1 &
wait
