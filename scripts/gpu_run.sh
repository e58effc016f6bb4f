#!/usr/bin/env bash
# The one GPU job, run on the device machine: install the packages, check correctness, benchmark.
# Usage: bash scripts/gpu_run.sh OUT_DIR STAGE...   (results land in OUT_DIR)
#   core : conv-core's GPU checks (aten vs F.conv2d, torch.compile, CUDA graphs, host overhead),
#          the conformance kit on aten, and the ResNet-50 forward bench with its chart
#   check:NAME : the conformance kit on backend NAME, then its candidates on the suites' real sizes
#   verify:NAME : every GPU correctness check of backend NAME at once, as parallel processes (compilation is the
#          slow part and uses the CPUs): CUDA pytest of its tests in two halves (not the
#          ahead-of-time compilation, which CI runs), the conformance kit, and the suite
#          checks (gpu_suite_checks.py) by direction and layout; each under `timeout ${VERIFY_S:-540}`, outputs
#          packed into OUT_DIR/verify_NAME.tgz
#   (check: and verify: pass --dtypes ${CHECK_DTYPES:-bf16,fp16,fp32} to the conformance kit: conv-cdna takes
#    CHECK_DTYPES=bf16,fp16, and CONV_CDNA_ARCH=gfx90a|gfx942|gfx950 to run a CDNA table's tiles on this GPU)
#   bench:NAME : the suites benchmarked in every direction and layout (no tuning database) and the
#                target report (conv-core tables report); raw files packed into OUT_DIR/bench_NAME.tgz (the device
#                returns few files; `conv-core tables bundle` adds them to docs/benchmarks/raw/NAME.json.gz)
#   tune:NAME  : `conv-core tune` over the same suites, split into the tables NAME and aten ship (`conv-core tables
#                split`, naming the run $TABLES_RUN), installed into the packages for the stages after it
#                (OUT_DIR/tune_NAME.tgz; TUNE_MERGE=1 merges into the shipped tables instead); TUNE_SUITES, TUNE_DIRECTIONS and TUNE_LAYOUTS narrow it as BENCH_* narrow bench
#   sweep:NAME : `python -m conv_NAME.sweep run $SWEEP_ARGS_NAME` (the offline configuration sweep), merged into the
#                package's data/swept/<arch>.json for the stages after it (OUT_DIR/sweep_NAME.json)
#   gluon      : conv-gluon's GPU harness (pytest of plugins/conv-gluon/tests/test_gpu_harness.py; stages
#                $GLUON_STAGES, comma list, default all; start no case after $GLUON_BUDGET_S s, default 420)
#                into OUT_DIR/gluon (gpu_gluon.json, gpu_gluon.md)
#   pytest:PATH : CUDA pytest of one test file (CONV_RDNA_TEST_DEVICE=cuda), -k $PYTEST_K if set
#   models     : the real-model benchmark (conv-core bench --model) of each model in $MODELS (default: the issue's
#                six) into OUT_DIR/models_NAME.json (and all of them in OUT_DIR/models.tgz: the device returns few
#                files), modes $MODEL_MODES (default all), $MODEL_ARGS appended; no model is started once
#                $MODELS_BUDGET_S seconds have passed
#   calls      : each layer of $CALL_SUITES through conv_core.conv*d / conv_transpose*d as a model calls it: forward
#                and gradients against float64, eager time per call against F.* (scripts/gpu_layer_calls.py)
#                into OUT_DIR/layer_calls.json
#   host       : host time per call (conv-core bench --host) into OUT_DIR/host.json
#   attribute  : where converted models lose time, per layer, and a cProfile of one plugin call per backend
#                (scripts/gpu_attribution.py $ATTRIBUTION_ARGS) into OUT_DIR/attribution.json, host_profile.txt
#                (and, with --step-profile MODELS in it, each model's eager step profiled: step_profile.txt)
#   holdout    : the ranking on layers no table saw (conv-core bench --holdout $HOLDOUT_ARGS) into OUT_DIR/holdout.json
#   ddp        : the DDP training step on every GPU (conv_tools.model_bench_ddp) into OUT_DIR/ddp.json
#   graphs     : CUDA graph capture of a training step with each backend forced (conv-core's GPU test) and
#                conv-gluon's launch-path checks (graph vs eager, host time, compilations) into OUT_DIR/gluon_host.json
#   firstcall  : first-call cost of a converted ResNet-50 on an empty Triton cache (scripts/gpu_first_call.py)
#   profile    : Nsight Compute on the kernels named conv_* of each case in $PROFILE_CASES (lines
#                "KERNEL|LAYER KEY", run by scripts/profile_layer.py) into OUT_DIR/profile.txt
# bench and tune load only aten and backend NAME (CONV_CORE_PLUGINS); REPS sets their repetitions (30);
# BENCH_SUITES, BENCH_DIRECTIONS and BENCH_LAYOUTS narrow bench (default: all three suites, directions, layouts).
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CONV_CORE_TUNING_DB="$out/tuning.json"
for p in packages/*/ plugins/*/; do
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
    check:*)
      name=${stage#check:}
      conv-core check --device cuda --backend "$name" --dtypes ${CHECK_DTYPES:-bf16,fp16,fp32} 2>&1 | tail -12 \
        | tee "$out/check_$name.txt" || status=1
      python3 scripts/gpu_suite_checks.py --backend "$name" --out "$out" \
        --suites resnet50:2,sd_vae_decoder:1,retinanet_head:1 ${SUITE_CHECK_ARGS:-} \
        2>&1 | tee "$out/suite_checks_$name.txt" || status=1
      ;;
    verify:*)
      name=${stage#verify:}
      work=$(mktemp -d)
      # compilation for all targets: CI's; the gluon harness: the gluon stage's
      tests=($(ls plugins/conv-$name/tests/test_*.py | grep -v -e test_compile.py -e test_gpu_harness.py))
      half=$(( ${#tests[@]} / 2 ))
      lim=${VERIFY_S:-540}
      CONV_RDNA_TEST_DEVICE=cuda CONV_CDNA_TEST_DEVICE=cuda timeout "$lim" python3 -m pytest -v -p no:cacheprovider "${tests[@]:0:$half}" \
        > "$work/pytest_a.txt" 2>&1 &
      CONV_RDNA_TEST_DEVICE=cuda CONV_CDNA_TEST_DEVICE=cuda timeout "$lim" python3 -m pytest -v -p no:cacheprovider "${tests[@]:$half}" \
        > "$work/pytest_b.txt" 2>&1 &
      timeout "$lim" conv-core check --device cuda --backend "$name" --dtypes ${CHECK_DTYPES:-bf16,fp16,fp32} > "$work/check.txt" 2>&1 &
      for direction in fwd bwd_data bwd_weight; do
        for layout in nhwc nchw; do
          mkdir -p "$work/suite_${direction}_$layout"
          timeout "$lim" python3 scripts/gpu_suite_checks.py --backend "$name" --out "$work/suite_${direction}_$layout" \
            --suites "${VERIFY_SUITES:-retinanet_head:1,sd_vae_decoder:1,resnet50:8}" --directions $direction \
            --layouts $layout --dtypes bf16,fp16 > "$work/suite_${direction}_$layout.txt" 2>&1 &
        done
      done
      wait
      tail -n 3 "$work"/pytest_*.txt "$work"/check.txt "$work"/suite_*.txt
      tar czf "$out/verify_$name.tgz" -C "$work" .
      ;;
    bench:*)
      name=${stage#bench:}
      work=$(mktemp -d)
      for spec in ${BENCH_SUITES:-resnet50:32 sd_vae_decoder:1 retinanet_head:2}; do
        for direction in ${BENCH_DIRECTIONS:-fwd bwd_data bwd_weight}; do
          for layout in ${BENCH_LAYOUTS:-nhwc nchw}; do
            tag=${spec%%:*}_${direction}_${layout}
            CONV_CORE_PLUGINS=$name CONV_CORE_TUNING_DB=$work/empty.json conv-core bench --suite "${spec%%:*}" --batch "${spec##*:}" \
              --dtype bf16 --layout $layout --direction $direction --reps "${REPS:-30}" --json "$work/$tag.json" \
              > "$work/$tag.txt" 2>&1 || status=1
            tail -1 "$work/$tag.txt"
          done
        done
        tar czf "$out/bench_$name.tgz" -C "$work" .  # what is done so far survives a time-out
      done
      conv-core tables report --backend "$name" --title "conv-$name on $(nvidia-smi --query-gpu=name \
        --format=csv,noheader | head -1)" --out "$work/report_$name.md" "$work"/*_*_*.json || status=1
      cp "$work/report_$name.md" "$out/" && tar czf "$out/bench_$name.tgz" -C "$work" .
      ;;
    tune:*)
      name=${stage#tune:}
      work=$(mktemp -d)
      for spec in ${TUNE_SUITES:-resnet50:32 sd_vae_decoder:1 retinanet_head:2}; do
        for direction in ${TUNE_DIRECTIONS:-fwd bwd_data bwd_weight}; do
          for layout in ${TUNE_LAYOUTS:-nhwc nchw}; do
            CONV_CORE_PLUGINS=$name conv-core tune --suite "${spec%%:*}" --batch "${spec##*:}" --dtype bf16 --layout $layout \
              --direction $direction --reps "${REPS:-30}" --db "$work/tuning.json" >> "$work/tune.log" 2>&1 || status=1
          done
        done
        tar czf "$out/tune_$name.tgz" -C "$work" .  # what is done so far survives a time-out
      done
      # with TUNE_MERGE=1 the shipped tables keep their entries (a tuning of new suites joins them)
      mkdir -p "$work/tables" packages/conv-core/src/conv_core/data/tables "plugins/conv-$name/src/conv_$name/data/tables"
      merge=()
      if [ "${TUNE_MERGE:-0}" = 1 ]; then
        merge=(--merge)
        cp packages/conv-core/src/conv_core/data/tables/aten_*.json "plugins/conv-$name/src/conv_$name/data/tables/"*.json \
          "$work/tables/"
      fi
      conv-core tables split "$work/tuning.json" "$work/tables" "${merge[@]}" \
        --run "${TABLES_RUN:-gpu_run.sh tune:$name $(date -u +%Y-%m-%dT%H:%M) $(nvidia-smi --query-gpu=name \
        --format=csv,noheader | head -1)}" || status=1
      # install them where the packages ship them, so later stages of this run rank on them too
      cp "$work"/tables/aten_*.json packages/conv-core/src/conv_core/data/tables/
      cp "$work"/tables/"${name}"_*.json "plugins/conv-$name/src/conv_$name/data/tables/"
      tar czf "$out/tune_$name.tgz" -C "$work" .
      ;;
    sweep:*)
      name=${stage#sweep:}
      args_var=SWEEP_ARGS_$name
      python3 -m "conv_$name.sweep" run --out "$out/sweep_$name.json" ${!args_var:-} 2>&1 | tail -40 || status=1
      python3 -m "conv_$name.sweep" merge "$out/sweep_$name.json" || status=1
      ;;
    gluon)
      CONV_GLUON_GPU_OUT="$out/gluon" CONV_GLUON_GPU_STAGES="${GLUON_STAGES:-}" \
        CONV_GLUON_GPU_BUDGET_S="${GLUON_BUDGET_S:-420}" python3 -m pytest -v -rs -p no:cacheprovider \
        plugins/conv-gluon/tests/test_gpu_harness.py 2>&1 | tail -60 || status=1
      ;;
    pytest:*)
      CONV_RDNA_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider "${stage#pytest:}" ${PYTEST_K:+-k "$PYTEST_K"} \
        2>&1 | tail -30 | tee -a "$out/pytest.txt" || status=1
      ;;
    models)
      started=$(date +%s)
      for model in ${MODELS:-resnet50 convnext_tiny mobilenet_v3_large efficientnet_b0 retinanet sd_vae_decoder}; do
        if [ $(( $(date +%s) - started )) -ge "${MODELS_BUDGET_S:-100000}" ]; then
          echo "models: $model not started: MODELS_BUDGET_S=${MODELS_BUDGET_S} spent"; continue
        fi
        conv-core bench --model "$model" ${MODEL_MODES:+--modes "$MODEL_MODES"} --json "$out/models_$model.json" \
          ${MODEL_ARGS:-} 2>&1 | tail -25 || status=1
        tar czf "$out/models.tgz" -C "$out" $(cd "$out" && ls models_*.json)  # one file back for all of them
      done
      ;;
    calls)
      python3 scripts/gpu_layer_calls.py --suites "${CALL_SUITES:?CALL_SUITES=name:batch,...}" --out "$out" \
        ${CALL_ARGS:-} 2>&1 | tee "$out/layer_calls.txt" | grep -e '^==' -e FAILED -e 'layer calls' || status=1
      ;;
    host)
      conv-core bench --host --json "$out/host.json" 2>&1 | tail -30 || status=1
      ;;
    attribute)
      python3 scripts/gpu_attribution.py --out "$out" ${ATTRIBUTION_ARGS:-} 2>&1 | grep -v -e USDT -e Warning \
        | tee "$out/attribution.txt" || status=1
      ;;
    holdout)
      conv-core bench --holdout --json "$out/holdout.json" ${HOLDOUT_ARGS:-} 2>&1 | tail -30 || status=1
      ;;
    ddp)
      NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 -m torch.distributed.run \
        --nproc_per_node "$(nvidia-smi -L | wc -l)" -m conv_tools.model_bench_ddp --json "$out/ddp.json" \
        2>&1 | tail -20 || status=1
      ;;
    graphs)
      python3 -m pytest -q -p no:cacheprovider packages/conv-core/tests/test_gpu_graphs.py 2>&1 | tail -15 || status=1
      python3 plugins/conv-gluon/tests/gpu_host_path.py "$out/gluon_host.json" 2>&1 | tail -30 || status=1
      ;;
    firstcall)
      python3 scripts/gpu_first_call.py "$out/first_call.json" 2>&1 | tail -30 || status=1
      ;;
    profile)
      while IFS='|' read -r kernel layer; do
        [ -n "$kernel" ] || continue
        echo "=== $kernel on $layer" | tee -a "$out/profile.txt"
        ncu --clock-control none --kernel-name-base function --kernel-name regex:^conv_ --launch-skip 1 \
          --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          --section LaunchStats --section WarpStateStats --section SchedulerStats \
          python3 scripts/profile_layer.py "$kernel" "$layer" --reps 2 >> "$out/profile.txt" 2>&1 || status=1
      done <<< "${PROFILE_CASES:-}"
      tail -40 "$out/profile.txt"
      ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
