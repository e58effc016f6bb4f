"""Ahead-of-time compile checks: every shipped configuration (and the sweep space's), compiled on the CPU for sm_90a.

``python -m conv_gluon.aot [--jobs N] [--json PATH]`` compiles each specialization the tables can launch
(:func:`jobs`) through ``GluonASTSource`` for ``GPUTarget("cuda", 90, 32)``, with the arguments
:mod:`conv_gluon.plans` gives a launch, specialized as the JIT will (:mod:`conv_gluon.specialization`), and
reads the facts that decide whether it can run well (:func:`facts`):

- ``wgmma`` issued asynchronously: ``wgmma.mma_async`` and ``wgmma.wait_group 1`` in the PTX (one MMA left in
  flight while the previous stage is released; for the weight gradient's units of a filter column, a whole
  step's groups), ``WARPGROUP.DEPBAR.LE gsb0`` with that count (at most 7) and ``HGMMA`` in the SASS;
- registers redistributed between the partitions: ``setmaxnreg`` (PTX) / ``USETMAXREG`` (SASS), the kernel's
  ``.maxnreg`` and thread count as planned;
- no spills: ptxas reports 0 bytes of spill stores / loads and no stack frame, the PTX has no ``.local``
  accesses and the SASS no ``LDL`` / ``STL``;
- shared memory (``metadata.shared``) within the architecture's limit (``conv_core.arch.spec``) and within
  the tables' own bound (``tiling.shared_bytes``);
- the producer's copies: TMA for the weights (``cp.async.bulk.tensor.2d``), and ``cp.async`` with
  ``cp.async.mbarrier.arrive.noinc`` (gathering) or ``cp.async.bulk.tensor.4d`` (boxes) for the input;
- the epilogue's TMA store (``cp.async.bulk.tensor.4d.global.shared``) where the plan stores by TMA
  (``fwd_rows_box`` with a 16-bit, dense output).

Each configuration is compiled for each way of bringing the input (``cp_async`` with 16-byte copies and with
narrower ones under a channel mask, ``registers``, ``tma_box``) with the heaviest epilogue (bias, gelu), in
bfloat16, and in float16 once with an output channel count that is not a multiple of 16 (the epilogue then
stages the tile through shared memory, and the ring may be shallower); a few geometries catch what the JIT
specializes on (arguments equal to 1 become constants: stride 1, dilation 1, a 1D problem; no bias, no
activation; a float32 output; every box shape) and the data gradient's phases (negative padding, an output
that starts inside ``dx``), and 3D (NDHWC) in the gathering modes and the boxes that take it
(``plans.BOXES_3D``): the forward, a data-gradient phase at stride 2 (a depth phase's negative padding) and the
weight gradient (``*3d*`` shapes). Arguments that change with the batch or the image size are compiled as the JIT
takes them: plain integers (:mod:`conv_gluon.specialization`).

The weight gradient (``kernels/bwd_weight.py``) is compiled the same way for each of its configurations and
ways of bringing ``x`` (``wgrad_*`` modes) on a split problem (float32 partial stores), in bfloat16 and
float16, plus edge geometries with the first configuration (one split: ``dW`` stored in its 16-bit dtype,
from registers or staged; stride 2 with dilation and asymmetric padding; 1D; groups; 1x1; every box
shape); there ``dy`` must come by TMA (``cp.async.bulk.tensor.2d``, or ``.4d`` boxes) and be read transposed
by the ``wgmma`` (``tnspA``). Its second stage (``sum_splits``) is compiled per result dtype and checked for
spills. Needs no GPU and no ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import time
from dataclasses import asdict, dataclass

from conv_core.testing.aot import compile_all, compile_failure, distinct, ptxas_stats, report
from conv_core.arch import spec
from conv_core.problem import ConvProblem

from . import configs, launch, plans, specialization, sweep, tiling
from .registry import REGISTRY

TARGET = "sm_90"

#: The ways of bringing the input tile each configuration is compiled for: name -> (candidate kernel, input
#: channels per group as a function of the configuration). ``cp_async`` gets whole 16-byte vectors and whole
#: blocks; ``cp_async_narrow`` 2-channel vectors and a partial block (the vector mask); ``registers`` 3
#: channels. The weight gradient's (``wgrad_*``): 8-channel vectors with a partial tile of input channels (a
#: multiple of 16, so that one split stores 16-bit pairs from registers), 2-channel vectors and 3 channels (one
#: split stages its store), boxes of 8-channel pixels.
MODES = {
    "cp_async": ("fwd_gather", lambda c: 2 * c.block_k),
    "cp_async_narrow": ("fwd_gather", lambda c: c.block_k + 2),
    "registers": ("fwd_gather", lambda c: 3),
    "tma_box": ("fwd_box", lambda c: 2 * c.block_k),
    "tma_rows": ("fwd_rows_box", lambda c: 2 * c.block_k),
    "wgrad_cp_async": ("bwd_weight_gather", lambda c: 2 * c.block_n - 16),
    "wgrad_narrow": ("bwd_weight_gather", lambda c: c.block_n + 2),
    "wgrad_registers": ("bwd_weight_gather", lambda c: 3),
    "wgrad_box": ("bwd_weight_box", lambda c: 2 * c.block_n - 8),
    "wgrad_rows": ("bwd_weight_rows_box", lambda c: 2 * c.block_n - 8),
}

#: The most ``wgmma`` groups a SASS wait leaves in flight: ptxas turns ``wgmma.wait_group 12`` into
#: ``WARPGROUP.DEPBAR.LE gsb0, 0x7`` (it waits for more: correct, less overlap).
SASS_MAX_IN_FLIGHT = 7

#: The weight gradient's second stage, compiled per result dtype.
SUM_MODE = "wgrad_sum"

#: Geometries: ``mid`` for every configuration and mode; the others once per mode with the first
#: configuration (what the JIT specializes on differs: constants 1, a 1D height, a float32 output, the box
#: shape).
SHAPES = {
    "mid": dict(batch=2, input_size=(20, 21), filter_size=3, stride=1, padding=1, dilation=1),
    "s2d2": dict(batch=3, input_size=(23, 17), filter_size=(3, 5), stride=2, padding=((2, 1), (0, 3)), dilation=2,
                 bias=False),
    "conv1d": dict(batch=2, input_size=(45,), filter_size=5, stride=1, padding=2, dilation=1, bias=False,
                   activation=None),
    "1x1-f32out": dict(batch=2, input_size=(16, 16), filter_size=1, stride=1, padding=0, dilation=1,
                       out_dtype="float32"),
    # the data gradient, its last stride phase: an output starting inside dx (Y_START; an odd channel count),
    # a dilation, a negative padding (the forward padding exceeds the filter's reach)
    "bwd-s2": dict(batch=2, input_size=(19, 18), filter_size=3, stride=2, padding=1, dilation=1),
    "bwd-s2-dil3": dict(batch=1, input_size=(17, 20), filter_size=(5, 3), stride=2, padding=(4, 1), dilation=(3, 1)),
    "bwd-s1-pad3": dict(batch=2, input_size=(12, 13), filter_size=3, stride=1, padding=3, dilation=1),
    # 3D (the gathering modes, and the box modes where they apply): depth taps, a depth bound, and a data-gradient
    # phase of a depth phase
    "conv3d": dict(batch=2, input_size=(6, 10, 11), filter_size=3, stride=1, padding=1, dilation=1),
    "bwd3d-s2": dict(batch=2, input_size=(7, 9, 8), filter_size=3, stride=2, padding=(2, 1, 1), dilation=1),
    # tma_box only: images whose best box is each width of the table (BOX_H x BOX_W are constexprs)
    **{f"box{bw}": dict(batch=2, input_size=(128 // bw, bw), filter_size=3, stride=1, padding=2, dilation=2)
       for bw in configs.table(TARGET).box_widths},  # (wide tiles skip some: box_widths_wide)
}

#: The weight gradient's geometries: ``wg-mid`` (enough pixels that the table splits it) for every
#: configuration and mode, the others once per mode with the first configuration; ``wg-box<W>``: an image of
#: exactly one ``BLOCK_K / W x W`` box (the input size follows BLOCK_K).
WGRAD_SHAPES = {
    "wg-mid": dict(batch=32, input_size=(56, 56), filter_size=3, stride=1, padding=1, dilation=1),
    "wg-whole": dict(batch=1, input_size=(10, 11), filter_size=3, stride=1, padding=1, dilation=1),
    "wg-s2d2": dict(batch=8, input_size=(41, 37), filter_size=(3, 5), stride=2, padding=((2, 1), (0, 3)),
                    dilation=2),
    "wg-conv1d": dict(batch=16, input_size=(900,), filter_size=5, stride=1, padding=2, dilation=1),
    "wg-groups2": dict(batch=16, input_size=(28, 28), filter_size=3, stride=1, padding=1, dilation=1, groups=2),
    "wg-1x1": dict(batch=32, input_size=(28, 28), filter_size=1, stride=1, padding=0, dilation=1),
    "wg-conv3d": dict(batch=2, input_size=(8, 16, 16), filter_size=3, stride=(2, 1, 1), padding=1, dilation=1),
    **{f"wg-box{bw}": dict(batch=32, filter_size=3, stride=1, padding=1, dilation=1)
       for bw in configs.table(TARGET).box_widths},
}


@dataclass(frozen=True)
class Job:
    """One kernel specialization to compile."""

    config: str  # TileConfig.name
    mode: str  # key of MODES, or SUM_MODE
    dtype: str
    shape: str = "mid"

    @property
    def id(self) -> str:
        return f"{TARGET}-{self.mode}-{self.shape}-{self.config}-{specialization.TRITON_DTYPE[self.dtype]}"

    @property
    def kernel(self) -> str:
        if self.mode == SUM_MODE:
            return "bwd_weight_gather"  # (the plan whose second stage is compiled)
        forward = MODES[self.mode][0]
        return forward.replace("fwd", "bwd_data") if self.shape.startswith("bwd") else forward

    @property
    def weight_grad(self) -> bool:
        return self.kernel.startswith("bwd_weight")


def base_shape(mode: str) -> str:
    """The geometry every configuration of ``mode`` is compiled on."""
    return "wg-mid" if mode.startswith("wgrad") else "mid"


def representative_problem(job: Job, config: configs.TileConfig) -> ConvProblem | None:
    """The problem the job compiles (forward, bias and gelu, channels-last); None where the mode does not
    apply to the geometry (boxes need stride 1)."""
    if job.weight_grad:
        return weight_grad_problem(job, config)
    cin = MODES[job.mode][1](config)
    fields = {"bias": True, "activation": "gelu", **SHAPES[job.shape]}
    out_dtype = fields.pop("out_dtype", job.dtype)
    if job.shape.startswith("bwd"):  # dx has the channels the forward kernel produces: swapped, and odd
        problem = ConvProblem("fwd", in_channels=2 * config.block_n - 3, out_channels=cin, dtype=job.dtype,
                              layout="channels_last", arch=TARGET, **fields).with_direction("bwd_data")
    else:  # float16 jobs get an output channel count that is not a multiple of 16: the staged epilogue
        cout = 2 * config.block_n - (3 if job.dtype == "float16" else 0)
        problem = ConvProblem("fwd", in_channels=cin, out_channels=cout, dtype=job.dtype, out_dtype=out_dtype,
                              layout="channels_last", arch=TARGET, **fields)
    if plans.kernel_issue(problem, job.kernel, config, configs.table(TARGET)) is not None:
        return None
    if job.shape.startswith("box") and job.kernel not in ("fwd_box", "fwd_rows_box"):
        return None
    return problem


def weight_grad_problem(job: Job, config: configs.TileConfig) -> ConvProblem | None:
    """The weight-gradient problem a job compiles: input channels per the mode, ``2 BLOCK_M - 8`` output
    channels (a partial tile of whole 16-byte ``dy`` rows); None where the mode does not apply."""
    fields = dict(WGRAD_SHAPES[job.shape])
    groups = fields.pop("groups", 1)
    if job.shape.startswith("wg-box"):
        width = int(job.shape.removeprefix("wg-box"))
        if config.block_k % width or config.block_k // width > tiling.TMA_BOX_LIMIT:
            return None
        fields["input_size"] = (config.block_k // width, width)
    cin = MODES[job.mode][1](config) if job.mode != SUM_MODE else 2 * config.block_n - 8
    problem = ConvProblem("fwd", in_channels=cin * groups, out_channels=(2 * config.block_m - 8) * groups,
                          groups=groups, dtype=job.dtype, layout="channels_last", arch=TARGET,
                          **fields).with_direction("bwd_weight")
    if plans.kernel_issue(problem, job.kernel, config, configs.table(TARGET)) is not None:
        return None
    if job.shape.startswith("wg-box") and not job.kernel.endswith("_box"):
        return None
    return problem


def jobs() -> list[Job]:
    """Every distinct specialization the sm_90 tables ship (see the module's docstring)."""
    tab = configs.table(TARGET)
    found = []
    for mode, (kernel, _) in MODES.items():
        shipped = compiled_configs(REGISTRY.family_of(kernel))
        shapes = WGRAD_SHAPES if mode.startswith("wgrad") else SHAPES
        for config in shipped:
            two_dtypes = mode in ("cp_async", "tma_box", "tma_rows", "wgrad_cp_async", "wgrad_box", "wgrad_rows")
            for dtype in ("bfloat16", "float16") if two_dtypes else ("bfloat16",):
                found.append(Job(config.name, mode, dtype, base_shape(mode)))
            for shape in shapes:
                # edge geometries with the first configuration; box shapes also with the last (the widest
                # swizzle: the box's reshape to a matrix must keep it)
                boxes = shape.startswith(("box", "wg-box"))
                wanted = config == shipped[0] or (boxes and config == shipped[-1])
                job = Job(config.name, mode, "bfloat16", shape)
                if shape != base_shape(mode) and wanted and representative_problem(job, config) is not None:
                    found.append(job)
    first = tab.configs("bwd_weight_gather")[0].name
    found += [Job(first, SUM_MODE, dtype, "wg-mid") for dtype in ("bfloat16", "float16")]
    return found


def producer_of(job: Job, mode: str) -> configs.Producer:
    """The producer partition's budget the job's kernel was planned with."""
    tab = configs.table(TARGET)
    return (tab.weight_grad.producers if job.weight_grad else tab.producers)[mode]


def compiled_configs(family: str) -> tuple[configs.TileConfig, ...]:
    """The configurations of ``family`` that must compile: the table's (buckets and swept layers) and the
    offline sweep's space, which may ship any of them as a winner."""
    return tuple(dict.fromkeys(configs.table(TARGET).configs(family) + tuple(sweep.space_configs(TARGET, family))))


def find_config(kernel: str, name: str) -> configs.TileConfig:
    return next(c for c in compiled_configs(REGISTRY.family_of(kernel)) if c.name == name)


def job_plan(job: Job) -> tuple[ConvProblem, plans.Plan | plans.WeightGradPlan]:
    """The job's problem and the launch it compiles (the data gradient's: its last phase's)."""
    config = find_config(job.kernel, job.config)
    problem = representative_problem(job, config)
    entry = REGISTRY[job.kernel]
    p = entry.plan(problem, entry, config, configs.table(TARGET))
    return problem, p.phases[-1].plan if problem.direction == "bwd_data" else p


# ---- compiling and reading the output -----------------------------------------------------------------


def facts(ptx: str, sass: str, ptxas_log: str) -> dict:
    """What the compile checks read off one kernel's PTX, SASS and ptxas log."""
    found = ptxas_stats(ptxas_log)
    maxnreg = re.search(r"^\.maxnreg (\d+)", ptx, re.MULTILINE)
    threads = re.search(r"^\.reqntid (\d+)", ptx, re.MULTILINE)
    found.update(
        maxnreg=int(maxnreg.group(1)) if maxnreg else -1,
        threads=int(threads.group(1)) if threads else -1,
        wgmma=sorted(set(re.findall(r"wgmma\.mma_async[\w.:]*", ptx))),
        wgmma_wait=sorted({int(n) for n in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}),
        setmaxnreg=sorted(set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))),
        local_memory=len(re.findall(r"\b(?:ld|st)\.local\b", ptx)),
        tma_2d=len(re.findall(r"cp\.async\.bulk\.tensor\.2d", ptx)),
        tma_4d=len(re.findall(r"cp\.async\.bulk\.tensor\.4d", ptx)),
        tma_store=len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)),
        cp_async=len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx)),
        cp_async_arrive=len(re.findall(r"cp\.async\.mbarrier\.arrive\.noinc", ptx)),
        sass_hgmma=sorted(set(re.findall(r"HGMMA\.[\w.]+", sass))),
        # the A operand read MN-major from shared memory (the weight gradient's dy^T)
        sass_transposed_a=bool(re.search(r"HGMMA\.[^\n]*\.tnspA", sass)),
        # the MMAs left in flight by each wait
        sass_depbar=sorted({int(n, 16) for n in re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)", sass)}),
        sass_setmaxreg=len(re.findall(r"USETMAXREG", sass)),
        sass_local=len(re.findall(r"\b(?:LDL|STL)\b", sass)),
    )
    return found


def _kernel_and_specialization(job: Job) -> tuple[object, tuple[dict, dict, dict], dict, object]:
    """The kernel a job compiles, its specialization as the JIT makes it ``(signature, constexprs, attrs)``, the
    compile options, and the plan."""
    from . import descriptors
    from .kernels.bwd_weight import conv_bwd_weight, sum_splits
    from .kernels.fwd import conv_fwd

    problem, p = job_plan(job)
    if job.mode == SUM_MODE:
        return sum_splits, specialization.sum_specialization(p, sum_splits), dict(num_warps=p.reduce.num_warps), p
    kernel = conv_bwd_weight if isinstance(p, plans.WeightGradPlan) else conv_fwd
    spec_ = specialization.plan_specialization(p, kernel, launch.role_dtypes(problem, p), descriptors.signature)
    return kernel, spec_, dict(num_warps=p.num_warps, maxnreg=p.maxnreg), p


def specialization_key(job: Job) -> tuple:
    """What one compile of ``job`` produces depends on: the kernel, its specialization and options. Jobs with
    the same key (two geometries the JIT specializes alike) are compiled once
    (:func:`conv_core.testing.aot.distinct`)."""
    kernel, (signature, constexprs, attrs), options, _ = _kernel_and_specialization(job)
    return (kernel.__name__, tuple(signature.items()), tuple(sorted(constexprs.items())),
            tuple(sorted((k, repr(v)) for k, v in attrs.items())), tuple(sorted(options.items())))


def planned(job: Job) -> dict:
    """What the plan of ``job`` says its compiled kernel must show (every job's own, compiled or not)."""
    result = dict(job=asdict(job), id=job.id, shared_limit=spec(TARGET).shared_memory_bytes)
    _, p = job_plan(job)
    if job.mode == SUM_MODE:
        return {**result, "kind": "sum", "splits": p.splits}
    c = p.config
    producer = producer_of(job, p.a_mode)
    return {**result, "kind": "wgrad" if job.weight_grad else "conv", "a_mode": p.a_mode,
            "planned_maxnreg": p.maxnreg, "planned_threads": 32 * tiling.total_warps(c.num_warps, producer.warps),
            "stages": p.stages, "staged_epilogue": bool(p.staging_bytes), "in_flight": getattr(p, "in_flight", 1),
            "tma_store_planned": bool(dict(p.constexprs).get("TMA_STORE")), "shared_bound": p.shared_bound}


def _compile(kernel, signature: dict, constexprs: dict, attrs: dict, options: dict):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    log = io.StringIO()
    triton.knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log
    triton.knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers, spills, stack
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(GluonASTSource(kernel, signature, constexprs, attrs),
                                  target=GPUTarget("cuda", 90, 32), options=options)
    return compiled, facts(compiled.asm["ptx"], compiled.asm["sass"], log.getvalue())


def compile_job(job: Job) -> dict:
    """Compile one job for sm_90a as the JIT specializes it; return its facts (or the error) and what they must
    be, as a plain dict."""
    started = time.perf_counter()
    result = dict(job=asdict(job), id=job.id)
    try:
        result = planned(job)
        kernel, (signature, constexprs, attrs), options, _ = _kernel_and_specialization(job)
        compiled, found = _compile(kernel, signature, constexprs, attrs, options)
        result.update(ok=True, shared=compiled.metadata.shared, **found)
    except Exception as exc:  # reported per job; the test fails on it
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:3000])
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def compile_distinct(job_list: list[Job], workers: int) -> list[dict]:
    """Every job's result, each distinct specialization compiled once: a job that compiles the same code as an
    earlier one gets that compile's facts with its own plan's expectations (:func:`planned`)."""
    keys = [specialization_key(job) for job in job_list]
    unique, counts = distinct(list(zip(keys, job_list)), lambda pair: pair[0])
    done = dict(zip((key for key, _ in unique), compile_all(compile_job, [job for _, job in unique], workers)))
    print(f"{counts['jobs']} jobs, {counts['compiles']} distinct compiles")
    results = []
    for key, job in zip(keys, job_list):
        first = done[key]
        results.append(first if first["id"] == job.id else {**first, **planned(job), "seconds": 0.0})
    return results


def problems_of(result: dict) -> list[str]:
    """What is wrong with a compiled job (empty: nothing)."""
    if not result.get("ok"):
        return compile_failure(result)
    if result.get("kind") == "sum":
        return _sum_problems(result)
    issues = []
    if not result["wgmma"] or not result["sass_hgmma"]:
        issues.append("no wgmma.mma_async / HGMMA")
    flight = result["in_flight"]
    if flight not in result["wgmma_wait"] or min(flight, SASS_MAX_IN_FLIGHT) not in result["sass_depbar"]:
        issues.append(f"wgmma not left in flight (wait_group {result['wgmma_wait']}, DEPBAR.LE gsb0 "
                      f"{result['sass_depbar']}; wanted {flight})")
    if not result["setmaxnreg"] or not result["sass_setmaxreg"]:
        issues.append("no setmaxnreg: the partitions' registers are not redistributed")
    if result["maxnreg"] != result["planned_maxnreg"] or result["threads"] != result["planned_threads"]:
        issues.append(f".maxnreg {result['maxnreg']} / .reqntid {result['threads']} differ from the plan's "
                      f"{result['planned_maxnreg']} / {result['planned_threads']}")
    if result["registers"] > result["planned_maxnreg"] or result["registers"] < 0:
        issues.append(f"{result['registers']} registers > maxnreg {result['planned_maxnreg']} (or unknown)")
    if result["spill_bytes"] != 0 or result["stack_bytes"] != 0:
        issues.append(f"spills: {result['spill_bytes']} bytes, stack frame {result['stack_bytes']} (-1: unknown)")
    if result["local_memory"] or result["sass_local"]:
        issues.append(f"local memory: {result['local_memory']} PTX / {result['sass_local']} SASS accesses")
    if result["shared"] > result["shared_limit"]:
        issues.append(f"shared memory {result['shared']} > limit {result['shared_limit']}")
    if result["shared"] > result["shared_bound"]:
        issues.append(f"shared memory {result['shared']} > the tables' bound {result['shared_bound']}")
    mode = result["a_mode"]
    weight_grad = result.get("kind") == "wgrad"
    if weight_grad and not result["sass_transposed_a"]:
        issues.append("the wgmma does not read dy transposed (no HGMMA ... tnspA)")
    if not result["tma_2d"] and not (weight_grad and mode == "tma_box"):
        issues.append("dy is not loaded by TMA" if weight_grad else "the weights are not loaded by TMA")
    if mode == "tma_box" and not result["tma_4d"]:
        issues.append("tma_box without a 4D TMA load")
    if result.get("tma_store_planned") and not result["tma_store"]:
        issues.append("the plan stores by TMA, the PTX has no TMA store")
    if mode == "cp_async" and not (result["cp_async"] and result["cp_async_arrive"]):
        issues.append("cp_async without cp.async copies and their noinc mbarrier arrivals")
    if mode != "cp_async" and result["cp_async"]:
        issues.append(f"{mode} issues cp.async")
    return issues


def _sum_problems(result: dict) -> list[str]:
    """The second stage: no spills, no local memory, no shared memory beyond the limit."""
    issues = []
    if result["spill_bytes"] != 0 or result["stack_bytes"] != 0 or result["local_memory"] or result["sass_local"]:
        issues.append(f"spills: {result['spill_bytes']} bytes, stack frame {result['stack_bytes']}, local memory "
                      f"{result['local_memory']} PTX / {result['sass_local']} SASS")
    if result["shared"] > result["shared_limit"]:
        issues.append(f"shared memory {result['shared']} > limit {result['shared_limit']}")
    return issues


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_gluon.aot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH as a JSON list")
    parser.add_argument("--only", metavar="SUBSTRING", help="compile the jobs whose id contains SUBSTRING")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: the compile checks need Triton's compiler")
    job_list = [j for j in jobs() if args.only is None or args.only in j.id]
    results = compile_distinct(job_list, args.jobs)
    header = f"{'job':66} {'regs':>4} {'max':>4} {'spill':>5} {'shared':>7} {'limit':>7} {'s':>5}  issues"
    return report(results, args.json, header, row, problems_of)


def row(r: dict) -> str:
    """A compiled job's line of the table ``main`` prints."""
    return (f"{r['id']:66} {r['registers']:4} {r['maxnreg']:4} {r['spill_bytes']:5} {r['shared']:7} "
            f"{r['shared_limit']:7} {r['seconds']:5}  {'; '.join(problems_of(r))}")


if __name__ == "__main__":
    sys.exit(main())
