#!/bin/bash
# THROWAWAY (round 4c): a second trace draw of S5Lh, to tell the design from the draw.
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=nums
P=/work/main/.venv/bin/python
T="/usr/bin/time -f cpu_%U+%S taskset -c 1"
$T $P warmstart.py runs/p2_S5Lh_1 --init w1b --seed 1 --mix S5Lh --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/p2_S5Lh_1.log 2>&1
$T $P p0_measure.py runs/p2_S5Lh_1/final --seeds 0,1,2 --json r4/results_p0r4.jsonl > logs/m_p2_S5Lh_1.log 2>&1
echo done > logs/r6.done
