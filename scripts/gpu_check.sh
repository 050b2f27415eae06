#!/usr/bin/env bash
# The GPU path's checks (scripts/gpu_check.py): PASS/FAIL per check, exit 1 on any failure,
# one SKIPPED line where there is no CUDA device. Under 5 minutes on one GPU.
#   scripts/gpu_check.sh            # from the repository, after make setup
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled MUJOCO_GL="${MUJOCO_GL:-egl}"
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
exec timeout 300 "$python" scripts/gpu_check.py
