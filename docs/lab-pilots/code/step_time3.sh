#!/bin/bash
# THROWAWAY (round 3): CPU s/step of 5 GRPO steps with grpoctl train (time/* patched to CPU s), at 8x8 and 16x8.
# usage: step_time3.sh MODEL_DIR NAME
M=$1; N=$2
cd /work/pilots
export PYTHONPATH=/work/pilots OMP_NUM_THREADS=1 GRPOCTL_DB=/work/pilots/registry.db
P=/work/main/.venv/bin/python
for b in 8 16; do
  if [ $b = 8 ]; then B="rollout_batch_size=64 train_batch_size=64 gradient_accumulation_steps=1"; else B="rollout_batch_size=128 train_batch_size=128 gradient_accumulation_steps=4"; fi
  /usr/bin/time -f "cpu %U+%S" taskset -c 1 $P train_wrap.py train lab_base.yaml model.path=$M steps=5 eval.at_start=false eval.every=0 name=${N}_$b $B 2>&1 | grep -v Loading | tail -3
  sqlite3 registry.db "select m.step, group_concat(m.name || '=' || round(m.value,3), ' ') from metric m join run r on r.id=m.run_id where r.name='${N}_$b' and m.name in ('time/step','time/rollout','time/train','train/response_length','train/token_entropy','train/reward') group by m.step;"
done
