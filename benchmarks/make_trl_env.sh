#!/usr/bin/env bash
# The environment bench_vs_trl.py runs TRL in: its own venv, so TRL (and what it pulls
# in: accelerate, datasets) never becomes a dependency of grpoctl. CPU torch, pinned to
# the version grpoctl is measured with, so both sides run the same kernels.
#
#   bash benchmarks/make_trl_env.sh [VENV_DIR]     # default: .venv-trl at the repo root
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/.venv-trl}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q "trl==1.16.0"
"$venv/bin/pip" install -q -e "$repo"
"$venv/bin/python" -c "import torch, trl, transformers, grpoctl; print('trl', trl.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
