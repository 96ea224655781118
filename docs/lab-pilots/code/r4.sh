#!/bin/bash
# THROWAWAY (round 4): rebuild S5Lb (the machine lost round 3's runs) and try a longer phase 1 (w1c: +1,000 W1 steps).
# --init names are symlinks (w1, w1b, w1c) so each phase's RNG key is "lab-warmstart:MIX:0:PREV", as the package's.
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=nums
P=/work/main/.venv/bin/python
T="/usr/bin/time -f cpu_%U+%S taskset -c 1"
$T $P warmstart.py runs/w1 --mix W1 --layers 4 --steps 3000 --batch 32 --lr 2e-3 > logs/w1.log 2>&1; ln -sfn runs/w1/final w1
$T $P warmstart.py runs/w1b --init w1 --mix W1 --layers 4 --steps 1000 --batch 32 --lr 8e-4 --warmup 50 --min_lr_ratio 0.25 > logs/w1b.log 2>&1; ln -sfn runs/w1b/final w1b
$T $P warmstart.py runs/s5lb --init w1b --mix S5L --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/s5lb.log 2>&1
$T $P p0_measure.py runs/s5lb/final --seeds 0,1,2 --json r4/results_p0r4.jsonl > logs/m_s5lb.log 2>&1
$T $P warmstart.py runs/w1c --init w1b --mix W1 --layers 4 --steps 1000 --batch 32 --lr 8e-4 --warmup 50 --min_lr_ratio 0.25 > logs/w1c.log 2>&1; ln -sfn runs/w1c/final w1c
$T $P warmstart.py runs/s5lc --init w1c --mix S5L --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/s5lc.log 2>&1
$T $P p0_measure.py runs/s5lc/final --seeds 0,1,2 --json r4/results_p0r4.jsonl > logs/m_s5lc.log 2>&1
echo done > logs/r4.done
