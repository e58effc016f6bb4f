"""conv-gluon on a Hopper GPU: correctness, determinism and speed, in one pytest run of a few minutes.

One test per stage, in this order: ``warm`` (every distinct kernel compiled by parallel processes,
:mod:`gpu_harness_warm`), then ``issue``, ``configs``, ``determinism``, ``bench``, ``suites`` and ``kit``
(:mod:`gpu_harness_stages`). A stage runs all its cases, each in its own try/except, and fails if any case
failed. Skipped without CUDA: every case launches Gluon kernels, which need an sm_90 GPU.

On the GPU machine, from the repository root (``scripts/gpu_run.sh OUT gluon`` runs it)::

    CONV_GLUON_GPU_OUT=OUT python3 -m pytest plugins/conv-gluon/tests/test_gpu_harness.py -v -rs

Environment: ``CONV_GLUON_GPU_OUT`` the output folder (default: a pytest temporary folder), which receives
``gpu_gluon.json`` (every case, rewritten after each one) and ``gpu_gluon.md`` (summary tables);
``CONV_GLUON_GPU_STAGES`` a comma list of the stages to run (default all; the others are skipped, and the
warm stage compiles only for those listed); ``CONV_GLUON_GPU_BUDGET_S`` the seconds after which no case starts
(420: every stage within one 9-minute call; cases left are recorded as skipped);
``CONV_GLUON_GPU_CASE_TIMEOUT_S`` (150) after which a case is recorded as hung, the summary written and the
process ended with status 3 (the GPU cannot be reclaimed from a hung kernel in-process).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
from gpu_harness_run import Run, markdown
from gpu_harness_stages import (stage_bench, stage_configs, stage_determinism, stage_issue, stage_kit,
                                stage_suites)
from gpu_harness_warm import STAGES, stage_warm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="conv-gluon's GPU harness launches Gluon kernels: it needs a CUDA GPU (sm_90)")


def chosen_stages() -> list[str]:
    return [s for s in (os.environ.get("CONV_GLUON_GPU_STAGES") or ",".join(STAGES)).split(",") if s]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The run's record, shared by the stages; the summary is written when the last stage is done."""
    from conv_core.arch import device_arch, device_name
    import triton

    out = Path(os.environ.get("CONV_GLUON_GPU_OUT") or tmp_path_factory.mktemp("gpu_gluon"))
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    header = (f"{device_name(device)} ({device_arch(device)}), torch {torch.__version__}, triton {triton.__version__}, "
              f"cuDNN {torch.backends.cudnn.version()}")
    print(header, flush=True)
    run = Run(out, float(os.environ.get("CONV_GLUON_GPU_BUDGET_S", 420)),
              float(os.environ.get("CONV_GLUON_GPU_CASE_TIMEOUT_S", 150)), header)
    yield run, device, device_arch(device)
    (out / "gpu_gluon.md").write_text(markdown(run.results, header))
    print(f"{len(run.results)} cases, {run.elapsed():.0f} s; see {out / 'gpu_gluon.md'}")


STAGE_FUNCTIONS = {"warm": lambda: functools.partial(stage_warm, workers=min(16, os.cpu_count() or 1),
                                                     stages=chosen_stages()),
                   "issue": lambda: stage_issue, "configs": lambda: stage_configs,
                   "determinism": lambda: stage_determinism, "bench": lambda: stage_bench,
                   "suites": lambda: stage_suites, "kit": lambda: stage_kit}


@pytest.mark.parametrize("stage", STAGES)
def test_stage(harness, stage):
    if stage not in chosen_stages():
        pytest.skip(f"stage {stage} is not in CONV_GLUON_GPU_STAGES")
    run, device, arch = harness
    first = len(run.results)
    try:
        STAGE_FUNCTIONS[stage]()(run, device, arch)
    except Exception as exc:  # a stage that cannot even enumerate its cases
        run.case(stage, "(stage)", lambda e=exc: {"status": "error", "message": f"{type(e).__name__}: {e}"})
    failed = [f"{r['case']}: {r['status']} {str(r.get('message', ''))[:200]}" for r in run.results[first:]
              if r["status"] in ("fail", "error")]
    assert not failed, f"{len(failed)} case(s) of stage {stage} failed:\n" + "\n".join(failed)
