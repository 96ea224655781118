#!/bin/bash
# THROWAWAY (round 3): phase 2 S5 on the number-token phase 1, then the step-0 measures (3 seeds) and the step cost.
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=nums
P=/work/main/.venv/bin/python
while [ ! -f runs/r3_W1_L4/warmstart.json ]; do sleep 5; done
/usr/bin/time -f "cpu %U+%S" taskset -c 1 $P warmstart.py runs/r3c_S5_L4 --init runs/r3_W1_L4/final --mix S5 --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/r3c_S5_L4.log 2>&1
/usr/bin/time -f "cpu %U+%S" taskset -c 1 $P p0_measure.py runs/r3_W1_L4/final runs/r3c_S5_L4/final --seeds 0 --json r3/results_p0r3.jsonl > logs/r3_m_c.log 2>&1
/usr/bin/time -f "cpu %U+%S" taskset -c 1 $P p0_measure.py runs/r3c_S5_L4/final --seeds 1,2 --json r3/results_p0r3.jsonl > logs/r3_m_c12.log 2>&1
bash r3/step_time3.sh runs/r3c_S5_L4/final r3_st_S5 > logs/r3_steptime.log 2>&1
echo done
