#!/bin/bash
# THROWAWAY (round 3): phase 2 on mixture S5L (S5 with L1 direct answers wrong 3%, not 10%) from the longer phase 1.
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=nums
P=/work/main/.venv/bin/python
/usr/bin/time -f "cpu %U+%S" taskset -c 1 $P warmstart.py runs/r3c_S5Lb_L4 --init runs/r3_W1b_L4/final --mix S5L --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/r3c_S5Lb_L4.log 2>&1
/usr/bin/time -f "cpu %U+%S" taskset -c 1 $P p0_measure.py runs/r3c_S5Lb_L4/final --seeds 0,1,2 --json r3/results_p0r3.jsonl > logs/r3_m_cLb.log 2>&1
echo done
