#!/usr/bin/env bash
# The main job: install conv-core and every plugin into .venv, show what is there, benchmark, and say what it found.
# On a machine without a GPU it runs on the CPU (aten; Triton kernels only when TRITON_INTERPRET=1 is set), on
# three small ResNet-50 layers and a tiny model. On a GPU it runs the ResNet-50 layers and then what a user gets:
# ResNet-50 plain and converted, eager inference and training steps (needs torchvision).
# Arguments are passed to the layer benchmark (`conv-core bench --suite resnet50 ...`).
# The last line is the verdict (scripts/main_job_verdict.py); a failed step says what failed and what to do.
set -euo pipefail
cd "$(dirname "$0")"

STEP="starting"
HINT="run ./run.sh again; if it fails the same way, file an issue with its output."
# step WHAT HINT: announce a step, and what to do if it fails.
step() { STEP="$1"; HINT="$2"; echo "run.sh: $1"; }
on_exit() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "run.sh: FAILED while ${STEP} (exit ${status})."
    echo "run.sh: what to do: ${HINT}"
  fi
}
trap on_exit EXIT

# pip's own output, one line per package it collects or installs (its progress bars and notices left out):
# the first install downloads torch and triton and would otherwise be silent for minutes.
pip_install() {
  .venv/bin/python -m pip install --progress-bar off -c constraints.txt "$@" 2>&1 \
    | { grep --line-buffered -E '^ *(Collecting|Processing|Obtaining|Downloading|Building|Installing|Successfully|ERROR)' || true; } \
    | sed -u 's/^ */  pip: /'
}

step "checking python3 (3.10 or newer)" "install Python 3.10 or newer as python3 (with its venv module), then run ./run.sh again."
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'

step "creating .venv" "python3 -m venv failed: install Python's venv module (Debian/Ubuntu: apt-get install python3-venv), then run ./run.sh again."
python3 -m venv .venv
if ! .venv/bin/python -c 'import tomllib' 2>/dev/null; then
  pip_install tomli  # scripts/install_order.py reads pyproject.toml; Python 3.10 has no tomllib
fi

step "ordering the packages by their dependencies" "a pyproject.toml under packages/ or plugins/ did not parse, or their dependencies form a cycle: the line above names them."
packages=$(.venv/bin/python scripts/install_order.py)
for package in $packages; do
  step "installing $(basename "$package")" "pip could not install $(basename "$package"): its 'pip: ERROR' lines above say why. torch, triton, pluggy and numpy come from PyPI: check that it is reachable (and that pip's own index settings allow it), then run ./run.sh again; it reuses .venv."
  pip_install -e "$package"
done

step "listing the device and the backends" "conv-core is installed but does not start: the traceback above says where; run .venv/bin/conv-core info and file an issue with its output."
.venv/bin/conv-core info
.venv/bin/conv-core backends
records=$(mktemp -d)
.venv/bin/conv-core backends --json > "$records/backends.json"

model=()
if .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  step "benchmarking the ResNet-50 layers on the GPU (every candidate of each, against aten)" "the layer benchmark failed: the lines above say which layer and kernel; run it alone with .venv/bin/conv-core bench --suite resnet50 --layers 3 and file an issue with its output."
  .venv/bin/conv-core bench --suite resnet50 --batch 32 --dtype bf16 --layout nhwc --direction fwd \
    --json "$records/layers.json" "$@"
  if .venv/bin/python -c 'import torchvision' 2>/dev/null; then
    step "ResNet-50 plain and converted: eager inference and training step (what a user gets)" "the model benchmark failed: the lines above say which mode; run .venv/bin/conv-core bench --model resnet50 --modes eager alone and file an issue with its output."
    .venv/bin/conv-core bench --model resnet50 --batch 32 --dtype bf16 --layout nhwc --modes eager,train \
      --json "$records/model.json"
    model=(--model "$records/model.json")
  else
    echo "run.sh: skipping the real-model benchmark: torchvision is not installed (pip install torchvision)"
  fi
else
  step "no GPU: benchmarking three ResNet-50 layers on the CPU (PyTorch's own convolution; the plugins' kernels need a GPU)" "the layer benchmark failed: the traceback above says where; file an issue with it and the output of .venv/bin/conv-core info."
  .venv/bin/conv-core bench --suite resnet50 --batch 1 --dtype fp32 --layout nchw --direction fwd --layers 3 \
    --reps 3 --warmup 1 --json "$records/layers.json" "$@"
  step "a tiny model plain and converted: eager inference and training step" "the model benchmark failed: the traceback above says where; file an issue with it and the output of .venv/bin/conv-core info."
  .venv/bin/conv-core bench --model tiny --modes eager,train --json "$records/model.json"
  model=(--model "$records/model.json")
fi

step "reading the results" "the verdict could not be read from the records in $records: file an issue with this output."
.venv/bin/python scripts/main_job_verdict.py --backends "$records/backends.json" --layers "$records/layers.json" \
  "${model[@]}"
rm -rf "$records"
