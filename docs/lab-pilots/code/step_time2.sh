#!/bin/bash
# THROWAWAY (round 2): CPU s/step of 5 GRPO steps with grpoctl train (time/* patched to CPU s).
# usage: step_time2.sh MODEL_DIR NAME [extra overrides, e.g. rollout_batch_size=128]
M=$1; N=$2; shift 2
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 GRPOCTL_DB=/work/pilots/registry.db
taskset -c 1 /work/main/.venv/bin/python train_wrap.py train lab_base.yaml model.path=$M steps=5 eval.at_start=false eval.every=0 name=$N "$@" 2>&1 | grep -v Loading | tail -3
sqlite3 registry.db "select m.step, group_concat(m.name || '=' || round(m.value,3), ' ') from metric m join run r on r.id=m.run_id where r.name='$N' and m.name in ('time/step','time/rollout','time/train','time/eval','train/response_length','train/token_entropy','train/reward') group by m.step;"
