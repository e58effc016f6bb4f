#!/usr/bin/env bash
# The real-model run of issue 21 on a 2-GPU machine, in about 8 minutes: DDP on both GPUs, then two streams of
# models (one per GPU), the host-time bench and a short held-out ranking run. Usage: bash scripts/gpu_issue21_final.sh OUT
set -uo pipefail
out=${1:?output folder}; mkdir -p "$out/r"
export PYTHONUNBUFFERED=1 CONV_CORE_TUNING_DB="$out/tuning.json"
for p in packages/conv-core plugins/*/; do python3 -m pip install -q --no-deps --no-build-isolation --no-index -e "$p"; done
NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 80 python3 -m torch.distributed.run \
  --nproc_per_node 2 -m conv_tools.model_bench_ddp --json "$out/r/ddp.json" > "$out/ddp.log" 2>&1
model() {  # GPU, seconds, model, modes, extra arguments
  CUDA_VISIBLE_DEVICES=$1 timeout "$2" conv-core bench --model "$3" --modes "$4" --rounds 5 --iterations 2 --json "$out/r/$3_${4//,/_}.json" \
    "${@:5}" >> "$out/gpu$1.log" 2>&1
}
(
  model 0 170 resnet50 eager,train,amp_train,graph,graph_train
  model 0 120 resnet50 compile --variants plain,conv
  model 0 70 mobilenet_v3_large eager,train,graph
) &
(
  CUDA_VISIBLE_DEVICES=1 timeout 30 conv-core bench --host --json "$out/r/host.json" >> "$out/gpu1.log" 2>&1
  model 1 110 sd_vae_decoder eager,train,graph
  model 1 90 retinanet eager,train,graph
  model 1 50 convnext_tiny eager,train
  model 1 50 efficientnet_b0 eager,train
) &
wait
grep -hE "x\)|ratio|error|Error" "$out"/*.log | tail -40
tar czf "$out/results.tgz" -C "$out" r ddp.log gpu0.log gpu1.log && rm -rf "$out/r"
