#!/bin/bash
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=tags
P=/work/main/.venv/bin/python
for m in S5 S8; do
taskset -c 1 $P warmstart.py runs/r2c_${m}_L4 --init runs/r2_W1_L4/final --mix $m --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/r2c_${m}_L4.log 2>&1 &
done
wait
taskset -c 1 $P p0_measure.py runs/r2c_S5_L4/final runs/r2c_S8_L4/final --json r2/results_p0r2.jsonl > logs/r2_m_cS_L4.log 2>&1
