#!/usr/bin/env bash
# The one GPU job, run on the device machine: install the packages, check correctness, benchmark.
# Usage: bash scripts/gpu_run.sh OUT_DIR STAGE...   (results land in OUT_DIR)
#   core : conv-core's GPU checks (aten vs F.conv2d, torch.compile, CUDA graphs, host overhead),
#          the conformance kit on aten, and the ResNet-50 forward bench with its chart
#   rdna : the conformance kit on conv-rdna, then the suites benchmarked in every direction and layout
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CONV_CORE_TUNING_DB="$out/tuning.json"
for p in packages/conv-core plugins/*/; do
  [ -f "$p/pyproject.toml" ] && python3 -m pip install -q --no-deps --no-build-isolation --no-index -e "$p"
done
conv-core info > "$out/info.txt" 2>&1; conv-core backends >> "$out/info.txt" 2>&1; cat "$out/info.txt"
status=0
for stage in "$@"; do
  case $stage in
    core)  # aten alone: the core's own behaviour, whatever plugins are installed
      export CONV_CORE_PLUGINS=aten
      python3 scripts/gpu_core_checks.py "$out" 2>&1 | tee "$out/core_checks.txt" || status=1
      conv-core check --device cuda --backend aten --dtypes bf16,fp16,fp32 2>&1 | tail -12 | tee "$out/check_aten.txt" || status=1
      conv-core bench --suite resnet50 --batch 32 --dtype bf16 --layout nhwc --direction fwd --reps 50 \
        --csv "$out/resnet50_fwd.csv" --json "$out/resnet50_fwd.json" --png "$out/resnet50_fwd.png" \
        2>&1 | tee "$out/resnet50_fwd.txt" || status=1
      unset CONV_CORE_PLUGINS
      ;;
    rdna)
      conv-core check --device cuda --backend rdna 2>&1 | tail -20 | tee "$out/check_rdna.txt" || status=1
      ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
