"""The stages of conv-gluon's GPU harness (``test_gpu_harness.py``), each a series of cases recorded by a
:class:`gpu_harness_run.Run`:

- ``issue``: every candidate the backend offers on the issue's shapes (3, 40 and 200 channels, stride 2,
  dilation 2, 1x1 and 7x7 filters, batch 1 and 128, groups, 1D, float16, a float32 output, bias and
  activations, output channels that are not multiples of 16; 3D (NDHWC) blocks at stride 1 and 2 and a video
  stem; all three directions), each through the
  conformance kit's ``check_candidate`` (poisoned ``out``, operands untouched, same bits twice, float64
  reference under the tolerance model);
- ``configs``: every shipped configuration of every kernel forced onto a problem with partial tiles, checked
  the same way;
- ``determinism``: the same inputs twice through each candidate on large layers (the weight gradient's split
  ones included), compared bit for bit;
- ``bench``: the two large layers timed against ``torch.nn.functional.conv2d`` (cuDNN, channels-last,
  ``cudnn.benchmark``), and the weight gradient of the RetinaNet-head suite's layers against
  ``torch.ops.aten.convolution_backward`` with ``output_mask=[False, True, False]`` (cuDNN's weight gradient
  alone), with ``conv_core.timing.median_us``, in TFLOP/s, each result compared with cuDNN's;
- ``suites``: the forward layers of the SD-VAE decoder and RetinaNet-head suites, timed the same way;
- ``kit``: conv-core's conformance kit (bf16 and fp16, NHWC, all three directions) on the ``gluon`` backend.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.nn.functional as F
from conv_core import activations
from conv_core.candidate import Candidate, Declined
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_tools.suites import suite_problems
from conv_core.testing import check_candidate
from conv_core.timing import median_us
from gpu_harness_cases import BIG_LAYERS, DETERMINISM_SHAPES, ISSUE_SHAPES, SUITES, WGRAD_SUITES, config_problem, make
from gpu_harness_run import Run


def gluon_candidates(problem: ConvProblem, device: torch.device) -> tuple[list[Candidate], list[str]]:
    from conv_gluon.candidates import candidates

    items = candidates(problem, device)
    return ([c for c in items if isinstance(c, Candidate)], [d.reason for d in items if isinstance(d, Declined)])


def checked(problem: ConvProblem, candidate: Candidate, device: torch.device) -> dict:
    outcome = check_candidate(problem, candidate, device, seed=1)
    return {"status": "ok" if outcome.ok else "fail", "kernel": candidate.kernel_id, "problem": problem.key,
            "worst_ratio": outcome.worst_ratio, "message": outcome.message}


# ---- stages -------------------------------------------------------------------------------------------------


def stage_issue(run: Run, device: torch.device, arch: str) -> None:
    for name, fields in ISSUE_SHAPES.items():
        problem = make(arch, fields)
        found, declined = gluon_candidates(problem, device)
        if not found:
            run.case("issue", name, lambda p=problem, d=declined: {"status": "fail", "problem": p.key,
                                                                  "message": f"no candidate: {d}"})
        for candidate in found:
            run.case("issue", f"{name} {candidate.kernel}", functools.partial(checked, problem, candidate, device))


#: The kernels whose every configuration the configs stage runs (the data gradient runs the forward's).
CONFIG_KERNELS = ("fwd_gather", "fwd_box", "fwd_rows_box", "bwd_weight_gather", "bwd_weight_box", "bwd_weight_rows_box")


def forced(arch: str, kernel: str, config):
    """``(problem, plan, run)`` of ``kernel`` forced to ``config`` on :func:`config_problem`."""
    from conv_gluon import configs, launch, plans as plan

    tab = configs.table_for(arch)
    problem = config_problem(arch, config, kernel)
    if kernel.startswith("bwd_weight"):
        p = plan.make_bwd_weight_plan(problem, kernel, config, tab)
        return problem, p, launch.runner(problem, p)
    p = plan.make_plan(problem, kernel, config, tab)
    return problem, p, launch.runner(problem, p)


def stage_configs(run: Run, device: torch.device, arch: str) -> None:
    from conv_gluon import configs
    from conv_gluon.registry import REGISTRY

    tab = configs.table_for(arch)
    for kernel in CONFIG_KERNELS:
        for config in tab.configs(REGISTRY.family_of(kernel)):
            def one(kernel=kernel, config=config):
                problem, p, fn = forced(arch, kernel, config)
                candidate = Candidate("gluon", kernel, config.name, run=fn, estimate_us=1.0,
                                      tags=frozenset({"deterministic"}), workspace_bytes=p.workspace_bytes)
                return {**checked(problem, candidate, device), "a_mode": p.a_mode,
                        "splits": getattr(p, "splits", 1)}

            run.case("configs", f"{kernel}:{config.name}", one)


def _same_bits(problem: ConvProblem, candidate: Candidate, device: torch.device) -> dict:
    operands = random_operands(problem, device, seed=3)
    first = candidate.run(*operands)
    second = candidate.run(*operands)
    torch.cuda.synchronize(device)
    same = torch.equal(first, second)
    return {"status": "ok" if same else "fail", "kernel": candidate.kernel_id, "problem": problem.key,
            "message": "bitwise equal" if same else f"{int((first != second).sum())} elements differ"}


def stage_determinism(run: Run, device: torch.device, arch: str) -> None:
    for name, fields in DETERMINISM_SHAPES.items():
        problem = make(arch, fields)
        for candidate in gluon_candidates(problem, device)[0]:
            run.case("determinism", f"{name} {candidate.kernel}",
                     functools.partial(_same_bits, problem, candidate, device))


def _cudnn(problem: ConvProblem, x, w, b):
    pad = problem.symmetric_padding
    if pad is None:
        raise ValueError("cuDNN baseline needs symmetric padding")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    y = conv(x, w, b, problem.stride, pad, problem.dilation, problem.groups)
    return activations.apply(problem.activation, y)


def _bench(problem: ConvProblem, device: torch.device, reps: int) -> dict:
    torch.backends.cudnn.benchmark = True
    x, w, b = random_operands(problem, device, seed=0)
    reference = _cudnn(problem, x, w, b)
    cudnn_us = median_us(lambda: _cudnn(problem, x, w, b), device, reps=reps)
    return _time_candidates(problem, device, reps, (x, w, b), reference, cudnn_us)


def _cudnn_wgrad(problem: ConvProblem, x, dy, w):
    """cuDNN's weight gradient alone: ``convolution_backward`` with ``output_mask=[False, True, False]`` (``w``:
    a channels-last tensor of the weight's shape; only its shape and memory format are read)."""
    pad = problem.symmetric_padding
    if pad is None:
        raise ValueError("cuDNN baseline needs symmetric padding")
    _, dw, _ = torch.ops.aten.convolution_backward(dy, x, w, None, list(problem.stride), list(pad),
                                                   list(problem.dilation), False, [0] * problem.ndim,
                                                   problem.groups, [False, True, False])
    return dw


def _bench_wgrad(problem: ConvProblem, device: torch.device, reps: int) -> dict:
    """The weight gradient timed against cuDNN's, in TFLOP/s (the forward's flops), each result compared."""
    torch.backends.cudnn.benchmark = True
    x, dy = random_operands(problem, device, seed=0)
    w = problem.empty_result(device)  # the weight's shape, channels-last: cuDNN's NHWC kernels
    reference = _cudnn_wgrad(problem, x, dy, w)
    cudnn_us = median_us(lambda: _cudnn_wgrad(problem, x, dy, w), device, reps=reps)
    return _time_candidates(problem, device, reps, (x, dy), reference, cudnn_us)


def _time_candidates(problem: ConvProblem, device: torch.device, reps: int, operands: tuple, reference,
                     cudnn_us: float) -> dict:
    """Each gluon candidate run once (compile included), compared with ``reference``, then timed."""
    tflops = lambda us: problem.flops / us / 1e6  # noqa: E731
    record = {"problem": problem.key, "gflop": round(problem.flops / 1e9, 2), "cudnn_us": round(cudnn_us, 1),
              "cudnn_tflops": round(tflops(cudnn_us), 1), "kernels": {}}
    found, declined = gluon_candidates(problem, device)
    if not found:
        record.update(status="fail", message=f"no candidate: {declined}")
        return record
    failures = []
    for candidate in found:
        entry = {}
        try:
            started = time.time()
            y = candidate.run(*operands)
            torch.cuda.synchronize(device)
            entry["first_call_s"] = round(time.time() - started, 2)  # compile included
            rel = float(torch.linalg.vector_norm(y.float() - reference.float())
                        / torch.linalg.vector_norm(reference.float()).clamp_min(1e-30))
            us = median_us(lambda c=candidate: c.run(*operands), device, reps=reps)
            entry.update(us=round(us, 1), tflops=round(tflops(us), 1), vs_cudnn=round(cudnn_us / us, 3),
                         rel_l2_vs_cudnn=rel)
            if hasattr(candidate.run.plan, "splits"):
                entry["splits"] = candidate.run.plan.splits
            if not rel < 2e-2:
                failures.append(f"{candidate.kernel}: relative L2 {rel:.3g} vs cuDNN")
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            failures.append(f"{candidate.kernel}: {entry['error']}")
        record["kernels"][candidate.kernel_id] = entry
    best = max((e.get("tflops", 0.0) for e in record["kernels"].values()), default=0.0)
    record.update(status="fail" if failures else "ok",
                  message="; ".join(failures) or f"best {best} TFLOP/s vs cuDNN {record['cudnn_tflops']}")
    return record


def wgrad_suite_problems(arch: str) -> list[tuple[str, ConvProblem]]:
    return [(f"{suite}/{layer[:60]}", problem) for suite, batch in WGRAD_SUITES.items()
            for layer, problem in suite_problems(suite, batch=batch, dtype="bfloat16", layout="channels_last",
                                                 direction="bwd_weight", arch=arch)]


def stage_bench(run: Run, device: torch.device, arch: str) -> None:
    for name, fields in BIG_LAYERS.items():
        run.case("bench", name, functools.partial(_bench, make(arch, fields), device, 25))
    for name, problem in wgrad_suite_problems(arch):
        run.case("bench", f"wgrad {name}", functools.partial(_bench_wgrad, problem, device, 15))


def stage_suites(run: Run, device: torch.device, arch: str) -> None:
    for suite, batch in SUITES.items():
        for layer, problem in suite_problems(suite, batch=batch, dtype="bfloat16", layout="channels_last",
                                             direction="fwd", arch=arch):
            run.case("suites", f"{suite}/{layer[:60]}", functools.partial(_bench, problem, device, 15))


#: The conformance kit's scope: all three directions, the two 16-bit dtypes, NHWC (what the backend claims).
KIT = dict(seed=0, random_count=4, dtypes=("bfloat16", "float16"), layouts=("channels_last",),
           directions=("fwd", "bwd_data", "bwd_weight"), max_macs=2_000_000)

#: How long one kit case (a whole direction) and the warm stage (every compile) may run before the watchdog
#: calls them hung.
KIT_CASE_TIMEOUT_S = 300.0
WARM_TIMEOUT_S = 360.0


def stage_kit(run: Run, device: torch.device, arch: str) -> None:
    from conv_core.engine import get_engine
    from conv_core.testing.conformance import run_conformance

    def one(direction):
        backend = get_engine().registry.get("gluon")
        if backend is None or not backend.ok:
            return {"status": "skipped", "message": "the gluon backend is not installed as a plugin "
                                                    "(pip install -e plugins/conv-gluon)"}
        report = run_conformance("gluon", device, **{**KIT, "directions": (direction,)})
        bad = report.failures
        return {"status": "ok" if report.ok else "fail", "checks": len(report.results), "failed": len(bad),
                "message": report.summary().splitlines()[0],
                "failures": [f"{r.check} {r.kernel_id} {r.problem_key}: {r.message}" for r in bad][:50]}

    for direction in KIT["directions"]:  # one case each, so that the time budget can stop between them
        run.case("kit", f"conformance gluon bf16,fp16 nhwc {direction}", functools.partial(one, direction),
                 timeout_s=KIT_CASE_TIMEOUT_S)
