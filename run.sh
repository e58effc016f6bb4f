#!/usr/bin/env bash
# The main job: install conv-core and every plugin into .venv, show what is there, benchmark.
# On a machine without a GPU it runs on the CPU (aten; Triton kernels only when
# TRITON_INTERPRET=1 is set), on three small ResNet-50 layers.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e packages/conv-core
for plugin in plugins/*/; do
  [ -f "$plugin/pyproject.toml" ] && .venv/bin/python -m pip install -q -c constraints.txt -e "$plugin"
done
.venv/bin/conv-core info
.venv/bin/conv-core backends
if .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  .venv/bin/conv-core bench --suite resnet50 --batch 32 --dtype bf16 --layout nhwc --direction fwd "$@"
else
  .venv/bin/conv-core bench --suite resnet50 --batch 1 --dtype fp32 --layout nchw --direction fwd --layers 3 \
    --reps 3 --warmup 1 "$@"
fi
