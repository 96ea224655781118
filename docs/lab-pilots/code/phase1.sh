#!/bin/bash
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 LAB_TASK=v2 LAB_TOK=tags
taskset -c 1 /work/main/.venv/bin/python warmstart.py runs/r2_W1_L2 --mix W1 --layers 2 --steps 3000 --batch 32 --lr 2e-3 --save 1500,2000,2500 > logs/r2_W1_L2.log 2>&1
taskset -c 1 /work/main/.venv/bin/python warmstart.py runs/r2_W1_L4 --mix W1 --layers 4 --steps 3000 --batch 32 --lr 2e-3 --save 1500,2000,2500 > logs/r2_W1_L4.log 2>&1
