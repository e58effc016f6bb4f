#!/usr/bin/env bash
# The one GPU job (device machine): install the packages, check correctness, benchmark.
# Usage: bash scripts/gpu_run.sh OUT_DIR [BENCH_ARGS...]   (results land in OUT_DIR)
set -uo pipefail
out=${1:?output folder}; shift || true
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CONV_CORE_TUNING_DB="$out/tuning.json"
packages=(packages/conv-core plugins/*/)
for p in "${packages[@]}"; do
  [ -f "$p/pyproject.toml" ] && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e "$p"
done
conv-core info | tee "$out/info.txt"
conv-core backends | tee -a "$out/info.txt"
python3 scripts/gpu_core_checks.py "$out" 2>&1 | tee "$out/core_checks.txt"
