#!/bin/bash
# THROWAWAY (round 4b): phase-2 draws and two mixtures on the rebuilt w1b; --seed k with --init only changes the
# phase's trace draw (RNG key "lab-warmstart:MIX:k:w1b"), not the weights it starts from.
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=nums
P=/work/main/.venv/bin/python
T="/usr/bin/time -f cpu_%U+%S taskset -c 1"
for v in ${VARIANTS:-"S5L 1" "S5L 2" "S5Lh 0" "S8L 0"}; do set -- $v
  $T $P warmstart.py runs/p2_$1_$2 --init w1b --seed $2 --mix $1 --layers 4 --steps 300 --batch 32 --lr 3e-4 --warmup 30 --min_lr_ratio 0.2 > logs/p2_$1_$2.log 2>&1
  $T $P p0_measure.py runs/p2_$1_$2/final --seeds 0,1,2 --json r4/results_p0r4.jsonl > logs/m_p2_$1_$2.log 2>&1
done
echo done > logs/r5.done
