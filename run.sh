#!/usr/bin/env bash
# The main job: install conv-core and every plugin into .venv, show what is there, benchmark.
# On a machine without a GPU it runs on the CPU (aten; Triton kernels only when
# TRITON_INTERPRET=1 is set), on three small ResNet-50 layers. On a GPU it then runs what a user gets:
# ResNet-50 plain and converted, eager inference and training steps (needs torchvision).
set -euo pipefail
cd "$(dirname "$0")"
step() { echo "run.sh: $*"; }
# pip's own output, one line per package it collects or installs (its progress bars and notices left out):
# the first install downloads torch and triton and would otherwise be silent for minutes.
pip_install() {
  .venv/bin/python -m pip install --progress-bar off -c constraints.txt "$@" 2>&1 \
    | { grep --line-buffered -E '^ *(Collecting|Processing|Obtaining|Downloading|Building|Installing|Successfully|ERROR)' || true; } \
    | sed -u 's/^ */  pip: /'
}
step "creating .venv"
python3 -m venv .venv
step "installing conv-core (torch, pluggy, numpy; the first install takes a few minutes)"
pip_install -e packages/conv-core
for plugin in plugins/*/; do
  if [ -f "$plugin/pyproject.toml" ]; then
    step "installing $(basename "$plugin")"
    pip_install -e "$plugin"
  fi
done
.venv/bin/conv-core info
.venv/bin/conv-core backends
if .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  .venv/bin/conv-core bench --suite resnet50 --batch 32 --dtype bf16 --layout nhwc --direction fwd "$@"
  if .venv/bin/python -c 'import torchvision' 2>/dev/null; then
    step "ResNet-50 plain and converted: eager inference and training step (what a user gets)"
    .venv/bin/conv-core bench --model resnet50 --batch 32 --dtype bf16 --layout nhwc --modes eager,train
  else
    step "skipping the real-model benchmark: torchvision is not installed (pip install torchvision)"
  fi
else
  .venv/bin/conv-core bench --suite resnet50 --batch 1 --dtype fp32 --layout nchw --direction fwd --layers 3 \
    --reps 3 --warmup 1 "$@"
  step "a tiny model plain and converted: eager inference and training step"
  .venv/bin/conv-core bench --model tiny --modes eager,train
fi
