"""conv-gluon on a Hopper GPU: correctness, determinism and speed, in one run of a few minutes.

Stages (all by default, in this order; each case in its own try/except, so one failure never stops the run):

- ``warm``: every distinct kernel the later stages launch, compiled without running by parallel processes
  (each through Triton's JIT, so the kernels land in Triton's on-disk cache, where the stages find them):
  compiling, about 1-3 s per kernel and one at a time otherwise, would dominate the run;
- ``issue``: every candidate the backend offers on the issue's shapes (3, 40 and 200 channels, stride 2,
  dilation 2, 1x1 and 7x7 filters, batch 1 and 128, groups, 1D, float16, a float32 output, bias and
  activations, output channels that are not multiples of 16; forward, data gradient and weight gradient),
  each through the conformance kit's ``check_candidate`` (poisoned ``out``, operands untouched, same bits
  twice, float64 reference under the tolerance model);
- ``configs``: every shipped configuration of every kernel (forward and weight gradient) forced onto a
  problem with partial tiles (channels not a multiple of BLOCK_K, output channels not a multiple of BLOCK_N;
  for the weight gradient, enough pixels to split the reduction), checked the same way;
- ``determinism``: the same inputs twice through each candidate on large layers (the weight gradient's split
  ones included), compared bit for bit;
- ``bench``: the two large layers (1x512x128x128 -> 512 and 128x384x64x64 -> 384, 3x3, bf16, NHWC) timed
  against ``torch.nn.functional.conv2d`` (cuDNN, channels-last, ``cudnn.benchmark``), and the weight gradient
  of the RetinaNet-head suite's layers against ``torch.ops.aten.convolution_backward`` with
  ``output_mask=[False, True, False]`` (cuDNN's weight gradient alone), with ``conv_core.timing.median_us``,
  in TFLOP/s, each result compared with cuDNN's;
- ``suites``: the forward layers of the SD-VAE decoder and RetinaNet-head suites, timed the same way;
- ``kit``: conv-core's conformance kit (edge cases and random problems; bf16 and fp16, NHWC, all three
  directions) on the ``gluon`` backend, when it is installed as a plugin.

Usage (on the GPU machine, from the repository root)::

    python3 scripts/gpu_gluon.py OUT_DIR [--stages warm,issue,configs,determinism,bench,suites,kit] [--budget-s 420]
    python3 scripts/gpu_gluon.py --list       # the launches and distinct kernels, no GPU needed

Writes ``OUT_DIR/gpu_gluon.json`` (every case, rewritten after each one, so a run cut short keeps what it did)
and ``OUT_DIR/gpu_gluon.md`` (summary tables). Cases left when ``--budget-s`` seconds have passed are recorded as
skipped; the default leaves every stage within one 9-minute call. A case still running after ``--case-timeout-s``
(a kernel that never returns: a barrier protocol gone wrong) is recorded as ``hung``, the summary written, and
the process exits with status 3 (the GPU cannot be reclaimed from a hung kernel in-process). Exits 1 if any
case failed. Works with the packages installed (``pip install -e``) or from the
checkout (it puts ``packages/conv-core/src`` and ``plugins/conv-gluon/src`` on the path).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for src in (ROOT / "packages" / "conv-core" / "src", ROOT / "plugins" / "conv-gluon" / "src"):
    if str(src) not in sys.path:
        sys.path.append(str(src))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from conv_core import activations  # noqa: E402
from conv_core.arch import device_arch, device_name  # noqa: E402
from conv_core.candidate import Candidate, Declined  # noqa: E402
from conv_core.problem import ConvProblem  # noqa: E402
from conv_core.reference import random_operands  # noqa: E402
from conv_core.suites import suite_problems  # noqa: E402
from conv_core.testing import check_candidate  # noqa: E402
from conv_core.timing import median_us  # noqa: E402

STAGES = ("warm", "issue", "configs", "determinism", "bench", "suites", "kit")

#: The issue's shapes: name -> ConvProblem fields (forward, NHWC; bf16 unless given).
ISSUE_SHAPES = {
    "stem-c3-7x7-s2-b8": dict(batch=8, in_channels=3, out_channels=64, input_size=(112, 112), filter_size=7,
                              stride=2, padding=3, bias=True, activation="relu"),
    "c3-3x3-b1": dict(batch=1, in_channels=3, out_channels=40, input_size=(128, 128), filter_size=3, padding=1),
    "c40-3x3-dil2-b1": dict(batch=1, in_channels=40, out_channels=40, input_size=(64, 64), filter_size=3,
                            dilation=2, padding=2, bias=True, activation="gelu"),
    "c40-1x1-b128": dict(batch=128, in_channels=40, out_channels=40, input_size=(28, 28), filter_size=1),
    "c200-3x3-b128": dict(batch=128, in_channels=200, out_channels=200, input_size=(14, 14), filter_size=3,
                          padding=1, bias=True),
    "c200-1x1-s2-b128": dict(batch=128, in_channels=200, out_channels=96, input_size=(28, 28), filter_size=1,
                             stride=2),
    "c256-3x3-s2-b128": dict(batch=128, in_channels=256, out_channels=256, input_size=(14, 14), filter_size=3,
                             stride=2, padding=1, bias=True, activation="silu"),
    "c64-7x7-b1": dict(batch=1, in_channels=64, out_channels=64, input_size=(56, 56), filter_size=7, padding=3),
    "c128-3x3-s2-dil2-b1": dict(batch=1, in_channels=128, out_channels=72, input_size=(33, 31), filter_size=3,
                                stride=2, dilation=2, padding=2),
    "c64-groups4-b8": dict(batch=8, in_channels=64, out_channels=64, groups=4, input_size=(28, 28), filter_size=3,
                           padding=1, activation="relu6"),
    "c200-fp16-gelu-tanh-b1": dict(batch=1, in_channels=200, out_channels=200, input_size=(32, 32), filter_size=3,
                                   padding=1, dtype="float16", bias=True, activation="gelu_tanh"),
    "c40-f32out-b2": dict(batch=2, in_channels=40, out_channels=72, input_size=(20, 20), filter_size=3, padding=1,
                          out_dtype="float32", bias=True, activation="silu"),
    "conv1d-c40-b4": dict(batch=4, in_channels=40, out_channels=40, input_size=(100,), filter_size=5, padding=2),
    "asym-pad-c16-b2": dict(batch=2, in_channels=16, out_channels=24, input_size=(17, 15), filter_size=(3, 2),
                            padding=((0, 2), (1, 0))),
    "k36-retina-bbox-b2": dict(batch=2, in_channels=256, out_channels=36, input_size=(25, 25), filter_size=3,
                               padding=1, bias=True),
    # the data gradient (one forward launch per stride phase)
    "bwd-c40-3x3-s2-b8": dict(direction="bwd_data", batch=8, in_channels=40, out_channels=64, input_size=(28, 28),
                              filter_size=3, stride=2, padding=1),
    "bwd-stem-c3-7x7-s2-b8": dict(direction="bwd_data", batch=8, in_channels=3, out_channels=64,
                                  input_size=(56, 56), filter_size=7, stride=2, padding=3),
    "bwd-c200-1x1-s2-b128": dict(direction="bwd_data", batch=128, in_channels=200, out_channels=96,
                                 input_size=(28, 28), filter_size=1, stride=2),
    "bwd-c256-3x3-dil2-b32": dict(direction="bwd_data", batch=32, in_channels=256, out_channels=256,
                                  input_size=(14, 14), filter_size=3, dilation=2, padding=2),
    "bwd-c64-groups4-b8": dict(direction="bwd_data", batch=8, in_channels=64, out_channels=64, groups=4,
                               input_size=(28, 28), filter_size=3, stride=2, padding=1),
    # the weight gradient (per-tap GEMMs over the pixels, split; dy by TMA, x gathered or boxed)
    "wgrad-stem-c3-7x7-s2-b8": dict(direction="bwd_weight", batch=8, in_channels=3, out_channels=64,
                                    input_size=(112, 112), filter_size=7, stride=2, padding=3),
    "wgrad-c3-3x3-b1": dict(direction="bwd_weight", batch=1, in_channels=3, out_channels=40, input_size=(128, 128),
                            filter_size=3, padding=1),
    "wgrad-c40-3x3-dil2-b1": dict(direction="bwd_weight", batch=1, in_channels=40, out_channels=40,
                                  input_size=(64, 64), filter_size=3, dilation=2, padding=2),
    "wgrad-c40-1x1-b128": dict(direction="bwd_weight", batch=128, in_channels=40, out_channels=40,
                               input_size=(28, 28), filter_size=1),
    "wgrad-c200-3x3-b128": dict(direction="bwd_weight", batch=128, in_channels=200, out_channels=200,
                                input_size=(14, 14), filter_size=3, padding=1),
    "wgrad-c200-1x1-s2-b128": dict(direction="bwd_weight", batch=128, in_channels=200, out_channels=96,
                                   input_size=(28, 28), filter_size=1, stride=2),
    "wgrad-c256-3x3-s2-b128": dict(direction="bwd_weight", batch=128, in_channels=256, out_channels=256,
                                   input_size=(14, 14), filter_size=3, stride=2, padding=1),
    "wgrad-c64-7x7-b1": dict(direction="bwd_weight", batch=1, in_channels=64, out_channels=64, input_size=(56, 56),
                             filter_size=7, padding=3),
    "wgrad-c128-3x3-s2-dil2-b1": dict(direction="bwd_weight", batch=1, in_channels=128, out_channels=72,
                                      input_size=(33, 31), filter_size=3, stride=2, dilation=2, padding=2),
    "wgrad-c64-groups4-b8": dict(direction="bwd_weight", batch=8, in_channels=64, out_channels=64, groups=4,
                                 input_size=(28, 28), filter_size=3, padding=1),
    "wgrad-c200-fp16-b1": dict(direction="bwd_weight", batch=1, in_channels=200, out_channels=200,
                               input_size=(32, 32), filter_size=3, padding=1, dtype="float16"),
    "wgrad-conv1d-c40-b4": dict(direction="bwd_weight", batch=4, in_channels=40, out_channels=40, input_size=(100,),
                                filter_size=5, padding=2),
    "wgrad-k36-retina-bbox-b2": dict(direction="bwd_weight", batch=2, in_channels=256, out_channels=36,
                                     input_size=(25, 25), filter_size=3, padding=1),
}

#: The two large layers of the issue: name -> fields.
BIG_LAYERS = {
    "1x512x128x128-512-3x3": dict(batch=1, in_channels=512, out_channels=512, input_size=(128, 128), filter_size=3,
                                  padding=1),
    "128x384x64x64-384-3x3": dict(batch=128, in_channels=384, out_channels=384, input_size=(64, 64),
                                  filter_size=3, padding=1),
}

#: Run twice, compared bit for bit: the large layers and two odd ones (many tiles per program, few channels).
DETERMINISM_SHAPES = {**BIG_LAYERS, "c200-3x3-b128": ISSUE_SHAPES["c200-3x3-b128"],
                      "stem-c3-7x7-s2-b8": ISSUE_SHAPES["stem-c3-7x7-s2-b8"],
                      "bwd-c40-3x3-s2-b8": ISSUE_SHAPES["bwd-c40-3x3-s2-b8"],
                      # the weight gradient: split reductions (partials summed in a fixed order)
                      "wgrad-retina-P3-b2": dict(direction="bwd_weight", batch=2, in_channels=256, out_channels=256,
                                                 input_size=(100, 100), filter_size=3, padding=1),
                      "wgrad-stem-c3-7x7-s2-b8": ISSUE_SHAPES["wgrad-stem-c3-7x7-s2-b8"],
                      "wgrad-c200-3x3-b128": ISSUE_SHAPES["wgrad-c200-3x3-b128"]}

#: Suites benchmarked (name -> batch; None: the suite's own), forward.
SUITES = {"sd_vae_decoder": None, "retinanet_head": None}

#: Suites whose weight gradient the bench stage times against cuDNN's (name -> batch; None: the suite's own).
WGRAD_SUITES = {"retinanet_head": None}


def make(arch: str, fields: dict) -> ConvProblem:
    fields = dict(fields)
    direction = fields.pop("direction", "fwd")
    base = dict(stride=1, padding=0, dilation=1, dtype="bfloat16", layout="channels_last", arch=arch)
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


class Run:
    """The results so far, the output files, the time budget and the watchdog of hung cases."""

    def __init__(self, out: Path, budget_s: float, case_timeout_s: float = 150.0, header: str = "") -> None:
        self.out, self.budget_s, self.start = out, budget_s, time.time()
        self.case_timeout_s, self.header = case_timeout_s, header
        self.results: list[dict] = []

    def elapsed(self) -> float:
        return time.time() - self.start

    def case(self, stage: str, name: str, fn, timeout_s: float | None = None) -> dict:
        """Run ``fn() -> dict`` as one case: record its result, its error, or that the budget was spent; a case
        that runs past ``timeout_s`` (default ``case_timeout_s``) is recorded as hung and ends the process."""
        record = {"stage": stage, "case": name}
        if self.elapsed() > self.budget_s:
            record.update(status="skipped", message=f"time budget of {self.budget_s:.0f} s spent")
        else:
            started = time.time()
            watchdog = threading.Timer(timeout_s or self.case_timeout_s, self._hung, (record, started))
            watchdog.daemon = True
            watchdog.start()
            try:
                record.update(fn())
                record.setdefault("status", "ok")
            except Exception as exc:  # reported, never fatal
                record.update(status="error", message=f"{type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc()[-3000:])
            finally:
                watchdog.cancel()
            record["seconds"] = round(time.time() - started, 2)
        self.results.append(record)
        self.save()
        print(f"{self.elapsed():7.1f}s {stage:12} {name:50} {record['status']:8} {record.get('message', '')[:150]}",
              flush=True)
        return record

    def _hung(self, record: dict, started: float) -> None:
        """The watchdog: the case never returned (a kernel that does not finish cannot be interrupted from
        Python). Record it, write the summary, and leave."""
        record.update(status="hung", seconds=round(time.time() - started, 2),
                      message=f"still running after {time.time() - started:.0f} s: ended the process")
        self.results.append(record)
        self.save()
        (self.out / "gpu_gluon.md").write_text(markdown(self.results, self.header))
        print(f"{self.elapsed():7.1f}s {record['stage']:12} {record['case']:50} hung", flush=True)
        os._exit(3)

    def save(self) -> None:
        path = self.out / "gpu_gluon.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str))
        os.replace(tmp, path)


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
    from conv_gluon import configs, launch, plan

    tab = configs.table_for(arch)
    problem = config_problem(arch, config, kernel)
    if kernel.startswith("bwd_weight"):
        p = plan.make_bwd_weight_plan(problem, kernel, config, tab)
        return problem, p, launch.runner(problem, p)
    p = plan.make_plan(problem, kernel, config, tab)
    return problem, p, launch.runner(problem, p)


def stage_configs(run: Run, device: torch.device, arch: str) -> None:
    from conv_gluon import configs, plan

    tab = configs.table_for(arch)
    for kernel in CONFIG_KERNELS:
        for config in tab.configs(plan.KERNELS[kernel]):
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
    conv = {1: F.conv1d, 2: F.conv2d}[problem.ndim]
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


# ---- summary ------------------------------------------------------------------------------------------------


def markdown(results: list[dict], header: str) -> str:
    lines = [f"# conv-gluon on the GPU\n\n{header}\n"]
    counts = {}
    for r in results:
        counts.setdefault(r["stage"], {}).setdefault(r["status"], 0)
        counts[r["stage"]][r["status"]] += 1
    statuses = ("ok", "fail", "error", "hung", "skipped")
    lines.append("| stage | " + " | ".join(statuses) + " |")
    lines.append("| --- |" + " --- |" * len(statuses))
    for stage, c in counts.items():
        lines.append(f"| {stage} | " + " | ".join(str(c.get(s, 0)) for s in statuses) + " |")
    checks = [r for r in results if r["stage"] in ("issue", "configs", "determinism", "kit") or r["status"] == "hung"]
    if checks:
        lines += ["\n## Correctness\n", "| stage | case | status | worst error/bound | s | message |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in checks:
            ratio = r.get("worst_ratio")
            lines.append(f"| {r['stage']} | {r['case']} | {r['status']} | "
                         f"{'' if ratio is None else f'{ratio:.3g}'} | {r.get('seconds', '')} | "
                         f"{str(r.get('message', '')).replace('|', '/')[:160]} |")
    timed = [r for r in results if r["stage"] in ("bench", "suites") and "cudnn_us" in r]
    if timed:
        lines += ["\n## Speed (bf16, NHWC; TFLOP/s; x cuDNN = cuDNN time / kernel time; wgrad: the weight gradient "
                  "against cuDNN's alone)\n",
                  "| case | GFLOP | cuDNN | kernel | splits | TFLOP/s | x cuDNN | rel L2 vs cuDNN |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in timed:
            for kernel, e in r["kernels"].items():
                lines.append(f"| {r['case']} | {r['gflop']} | {r['cudnn_tflops']} | {kernel} | {e.get('splits', '')} "
                             f"| {e.get('tflops', '-')} | {e.get('vs_cudnn', '-')} "
                             f"| {e.get('rel_l2_vs_cudnn', e.get('error', ''))} |")
    return "\n".join(lines) + "\n"


def planned(arch: str = "sm_90", stages=STAGES) -> list[tuple[str, str, ConvProblem, object]]:
    """``(stage, case, problem, plan)`` of every kernel launch the stages make, from the problems alone: no GPU
    needed (``--list``)."""
    from conv_core.testing.conformance import conformance_problems
    from conv_gluon import configs, plan

    device = torch.device("cuda")  # only its type is read
    found = []

    def add(stage, name, problem):
        if stage in stages:
            for candidate in gluon_candidates(problem, device)[0]:
                found.append((stage, f"{name} {candidate.kernel}", problem, candidate.run.plan))

    for name, fields in ISSUE_SHAPES.items():
        add("issue", name, make(arch, fields))
    tab = configs.table_for(arch)
    for kernel in CONFIG_KERNELS:
        for config in tab.configs(plan.KERNELS[kernel]) if "configs" in stages else ():
            problem, p, _ = forced(arch, kernel, config)
            found.append(("configs", f"{kernel}:{config.name}", problem, p))
    for name, fields in DETERMINISM_SHAPES.items():
        add("determinism", name, make(arch, fields))
    for name, fields in BIG_LAYERS.items():
        add("bench", name, make(arch, fields))
    for name, problem in wgrad_suite_problems(arch):
        add("bench", f"wgrad {name}", problem)
    for suite, batch in SUITES.items():
        for layer, problem in suite_problems(suite, batch=batch, dtype="bfloat16", layout="channels_last",
                                             direction="fwd", arch=arch):
            add("suites", f"{suite}/{layer[:60]}", problem)
    kit = {k: v for k, v in KIT.items() if k != "seed"}
    for problem in conformance_problems(arch, seed=KIT["seed"], edge=True, **kit):
        add("kit", problem.key, problem)
    return found


def config_problem(arch: str, config, kernel: str = "fwd_gather") -> ConvProblem:
    """A problem with partial tiles everywhere for ``config``: channels not a multiple of BLOCK_K (but of 8, so
    boxes apply), output channels not a multiple of BLOCK_N, pixels not a multiple of BLOCK_M. For the weight
    gradient: input channels not a multiple of BLOCK_N, output channels not of BLOCK_M, and pixels enough
    (about 50 k-steps) that the table splits the reduction."""
    if kernel.startswith("bwd_weight"):
        return make(arch, dict(direction="bwd_weight", batch=8, in_channels=2 * config.block_n - 8,
                               out_channels=2 * config.block_m - 8, input_size=(20, 19), filter_size=3, padding=1))
    return make(arch, dict(batch=3, in_channels=2 * config.block_k - 8, out_channels=2 * config.block_n - 8,
                           input_size=(20, 19), filter_size=3, padding=1, bias=True, activation="gelu"))


def _kernel_key(problem: ConvProblem, p) -> tuple:
    """What Triton's JIT specializes a candidate's launches on (two with one key share compiled kernels)."""
    from conv_gluon import plan, specialization
    from conv_gluon.kernels.fwd import conv_fwd

    def described(tmap, dtype):
        return f"{dtype}{tmap.block}"

    if isinstance(p, plan.WeightGradPlan):
        from conv_gluon.kernels.bwd_weight import conv_bwd_weight, sum_splits

        signature, constexprs, _ = specialization.plan_specialization(
            p, conv_bwd_weight, specialization.role_dtypes(problem, p), described)
        second = specialization.sum_specialization(p, sum_splits)[:2] if p.split else None
        return (tuple(signature.items()), tuple(constexprs.items()), p.maxnreg,
                None if second is None else (tuple(second[0].items()), tuple(second[1].items())))
    launches = [ph.plan for ph in p.phases] if isinstance(p, plan.DataGradPlan) else [p]
    key = []
    for lp in launches:
        signature, constexprs, _ = specialization.plan_specialization(lp, conv_fwd, specialization.role_dtypes(problem),
                                                                      described)
        key.append((tuple(signature.items()), tuple(constexprs.items()), lp.maxnreg))
    return tuple(key)


def distinct(cases) -> list:
    """The first case of each distinct kernel."""
    seen, first = set(), []
    for case in cases:
        key = _kernel_key(case[2], case[3])
        if key not in seen:
            seen.add(key)
            first.append(case)
    return first


def list_cases() -> int:
    """Print the launches the stages make and how many distinct kernels they compile (compiling dominates a
    first run: about 1-3 s per distinct kernel on one core)."""
    cases = planned()
    new = {id(c) for c in distinct(cases)}
    for case in cases:
        stage, name, _, p = case
        mode = getattr(p, "a_mode", f"{len(getattr(p, 'phases', ()))} phases")
        print(f"{stage:8} {name:70} {mode:9} {p.config_name:18} {'compile' if id(case) in new else ''}")
    print(f"{len(cases)} candidates, {len(new)} distinct to compile")
    return 0


def _warm_chunk(arch: str, items: list[tuple[str, str, str]]) -> list[str]:
    """In a child process: compile ``(problem key, kernel, configuration)`` launches through the JIT (into
    Triton's on-disk cache); return the errors."""
    from conv_gluon import configs, launch, plan

    tab = configs.table_for(arch)
    device = torch.device("cuda")
    errors = []
    for key, kernel, config_name in items:
        try:
            problem = ConvProblem.from_key(key)
            config = next(c for c in tab.configs(plan.KERNELS[kernel]) if c.name == config_name)
            make = {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
                    "bwd_weight": plan.make_bwd_weight_plan}[problem.direction]
            launch.warmup(problem, make(problem, kernel, config, tab), device)
        except Exception as exc:
            errors.append(f"{kernel} {key}: {type(exc).__name__}: {exc}"[:300])
    return errors


def stage_warm(run: Run, device: torch.device, arch: str, workers: int, stages) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    def one():
        kernels = distinct(planned(arch, stages))
        items = [(problem.key, p.kernel, p.config_name) for _, _, problem, p in kernels]
        chunks = [items[i::workers] for i in range(workers) if items[i::workers]]
        errors = []
        if chunks:
            with ProcessPoolExecutor(len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
                for found in pool.map(_warm_chunk, [arch] * len(chunks), chunks):
                    errors += found
        return {"status": "fail" if errors else "ok", "kernels": len(items), "errors": errors,
                "message": f"{len(items)} kernels in {len(chunks)} processes"
                           + (f"; {len(errors)} failed, first: {errors[0]}" if errors else "")}

    run.case("warm", "compile every distinct kernel", one, timeout_s=WARM_TIMEOUT_S)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="output directory")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no case after this many seconds (420: every stage within one 9-minute call)")
    parser.add_argument("--case-timeout-s", type=float, default=150.0,
                        help="a case running longer is recorded as hung and the process exits (status 3)")
    parser.add_argument("--list", action="store_true", help="list the launches and distinct kernels; no GPU needed")
    parser.add_argument("--warm-workers", type=int, default=min(16, os.cpu_count() or 1),
                        help="compile processes of the warm stage")
    args = parser.parse_args(argv)
    if args.list:
        return list_cases()
    if not args.out:
        parser.error("an output directory is needed")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    arch = device_arch(device)
    import triton

    header = (f"{device_name(device)} ({arch}), torch {torch.__version__}, triton {triton.__version__}, "
              f"cuDNN {torch.backends.cudnn.version()}")
    print(header, flush=True)
    run = Run(out, args.budget_s, args.case_timeout_s, header)
    chosen = args.stages.split(",")
    stages = {"warm": functools.partial(stage_warm, workers=args.warm_workers, stages=chosen), "issue": stage_issue,
              "configs": stage_configs, "determinism": stage_determinism, "bench": stage_bench, "kit": stage_kit,
              "suites": stage_suites}
    for stage in chosen:
        if stage not in stages:
            parser.error(f"unknown stage {stage!r}")
        try:
            stages[stage](run, device, arch)
        except Exception as exc:  # a stage that cannot even enumerate its cases
            run.case(stage, "(stage)", lambda e=exc: {"status": "error", "message": f"{type(e).__name__}: {e}"})
    (out / "gpu_gluon.md").write_text(markdown(run.results, header))
    failed = [r for r in run.results if r["status"] in ("fail", "error")]
    print(f"{len(run.results)} cases, {len(failed)} failed, {run.elapsed():.0f} s; see {out / 'gpu_gluon.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
