"""Ahead-of-time compile checks: every shipped configuration of every kernel, for GPUs we do not have.

``python -m conv_rdna.aot [--target gfx1100 ...] [--jobs N] [--json PATH]`` compiles, on the CPU, each
kernel specialization the configuration tables can launch (:func:`jobs`), for RDNA3 (gfx1100), RDNA4
(gfx1201) and Hopper (sm_90), and reports what the assembly shows: the matrix instructions used
(``v_wmma*`` / ``wgmma`` / ``mma.sync``), registers, spills, scratch and shared memory against the
architecture's limit (``conv_core.arch.spec``). The launch arguments come from :mod:`conv_rdna.plans`,
exactly as at run time, on a representative problem per kernel.

Each configuration is compiled for every input dtype whose problems can reach it (the buckets'
``dtypes`` conditions) and for both layouts; identical specializations (the weight gradient's split
reduction, mostly) are compiled once.

Must run without ``TRITON_INTERPRET=1`` (the kernels must be JIT functions, not interpreted ones).
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
from conv_core.kit.declines import interpreting
from conv_core.kit.launch import Launch
from conv_core.problem import ConvProblem

from . import configs, specialization, sweep
from .plans import few_channels, implicit_gemm, winograd, winograd_bwd_weight
from .registry import CHANNELS_FIRST, DEPTHWISE, GROUPED, PLANES, RANKS, REGISTRY, make_plan, names

#: Compile targets: arch name -> (Triton backend, arch, warp size).
TARGETS = {
    "gfx1100": ("hip", "gfx1100", 32),
    "gfx1201": ("hip", "gfx1201", 32),
    "sm_90": ("cuda", 90, 32),
}

#: Matrix instructions that count as "uses the matrix units", per Triton backend.
MATRIX_PATTERNS = {"hip": r"\bv_wmma_\w+", "cuda": r"\bwgmma\.mma_async[\w.]*|\bmma\.sync[\w.]*"}
#: Global loads and stores of one 8- or 16-bit element, per Triton backend (``"load"``, ``"store"``).
NARROW_PATTERNS = {
    "hip": {"load": r"\b(?:global|buffer)_load_(?:u16|d16\w*|ushort|short|sshort|u8|i8|ubyte|sbyte|b16|b8)\b",
            "store": r"\b(?:global|buffer)_store_(?:b16|b8|short|byte|d16\w*)\b"},
    "cuda": {"load": r"\bld\.global(?:\.(?!v\d)[\w:]+)*\.[bsu](?:8|16)\b",
             "store": r"\bst\.global(?:\.(?!v\d)[\w:]+)*\.[bsu](?:8|16)\b"},
}
#: The edge shape on which the kernels that tile channels-first pixels must move them in vectors: a ResNet
#: 1x1 layer on 14 x 14 maps, 196 pixels an image (``PIX_VEC`` 4: a multiple of 4 but not of 16, so the
#: compiler cannot see it unaided), and which accesses must be vectors there, per backend (the AMD backend
#: stores the matrix accumulator element by element in any layout).
PIXEL_VECTOR_SHAPE = "1x1-14x14"
PIXEL_VECTOR_ACCESSES = {"hip": ("load",), "cuda": ("load", "store")}
#: The edge shape on which the channels-first forward takes its pipelined loop where the architecture has
#: asynchronous copies (``plans.channels_first.pipelined_pixels``: a 1x1 layer of 256 pixels an image); on the ``mid``
#: geometry only the weight gradient does.
PIPELINED_SHAPE = "1x1-16x16"
#: The 3D edge shape: the kernels with a depth axis compiled with the depth sizes as arguments (in 1D/2D the JIT
#: compiles them in as the constant 1).
VOLUME_SHAPE = "3d"
#: ``mid`` with a transposed convolution's epilogue, for the data-gradient kernels that apply one: every
#: configuration is compiled both ways (the epilogue narrows some tiles, ``plans.shuffle.fitted``).
EPILOGUE_SHAPE = "mid-epilogue"
#: A global-to-shared asynchronous copy in NVIDIA PTX: a launch that takes the pipelined loop must issue them.
ASYNC_COPY_PATTERN = r"\bcp\.async\.c[ag]\.shared\.global\b"


#: Forward geometries the jobs compile on. ``mid``: every configuration, every dtype and layout. The
#: others catch what Triton's JIT specializes at run time (integer arguments equal to 1 become constants,
#: but for the sizes, ``kernels.common.SIZES``): 1D problems (height stride 0) with few and many channels, a
#: unit-channel image row (strides of 1), a 1x1 filter with stride 2; they are compiled once per kernel and
#: target, with the configuration the table picks for them.
SHAPES = {
    "mid": dict(batch=8, in_channels=64, out_channels=64, input_size=(32, 32), filter_size=3, padding=1),
    "conv1d": dict(batch=2, in_channels=8, out_channels=8, input_size=(30,), filter_size=3, stride=2, padding=1),
    "conv1d-wide": dict(batch=4, in_channels=256, out_channels=256, input_size=(64,), filter_size=3, padding=1),
    "unit": dict(batch=1, in_channels=1, out_channels=1, input_size=(1, 30), filter_size=(1, 3)),
    "1x1-s2": dict(batch=2, in_channels=8, out_channels=8, input_size=(15, 15), filter_size=1, stride=2),
    PIXEL_VECTOR_SHAPE: dict(batch=2, in_channels=64, out_channels=64, input_size=(14, 14), filter_size=1),
    PIPELINED_SHAPE: dict(batch=2, in_channels=64, out_channels=64, input_size=(16, 16), filter_size=1),
    # The channels-first kernels at stride 2: per-pixel addressing, and the data gradient's four phases.
    "3x3-s2": dict(batch=2, in_channels=64, out_channels=64, input_size=(28, 28), filter_size=3, stride=2, padding=1),
    # Depthwise geometries (groups = in_channels), for the depthwise kernels only: a ConvNeXt block, a
    # MobileNet 5x5 stride-2 layer (their weight-gradient buckets differ by filter size), multiplier 2.
    "dw7x7": dict(batch=4, in_channels=96, out_channels=96, input_size=(28, 28), filter_size=7, padding=3),
    "dw5x5-s2": dict(batch=8, in_channels=72, out_channels=72, input_size=(28, 28), filter_size=5, stride=2,
                     padding=2),
    "dw-mult2": dict(batch=2, in_channels=16, out_channels=32, input_size=(15, 15), filter_size=3, stride=2,
                     padding=1),
    # The grouped kernels only: ResNeXt's 32 groups of 4 channels (tiles of several groups), and 8 groups of 32 at
    # stride 2 (a tile of one group; the data gradient's four phases).
    "grouped-c4": dict(batch=4, in_channels=128, out_channels=128, groups=32, input_size=(28, 28), filter_size=3,
                       padding=1),
    "grouped-c32": dict(batch=2, in_channels=256, out_channels=256, groups=8, input_size=(14, 14), filter_size=3,
                        stride=2, padding=1),
    # 3D (the kernels with a depth axis only; the depthwise ones as a depthwise layer): a video clip's layer,
    # strided along the depth (the data gradient's depth phases).
    VOLUME_SHAPE: dict(batch=2, in_channels=32, out_channels=32, input_size=(5, 8, 8), filter_size=3,
                       stride=(2, 1, 1), padding=1),
    # Winograd only: one image (batch 1), asymmetric padding, wider channels.
    "wino-b1": dict(batch=1, in_channels=128, out_channels=192, input_size=(30, 29), filter_size=3,
                    padding=((0, 1), (1, 0))),
}
SHAPES[EPILOGUE_SHAPE] = SHAPES["mid"]
#: Geometries the depthwise kernels' configurations are compiled on: for each configuration, dtype and
#: layout, every one whose table choice is that configuration (so a 7x7 weight-gradient bucket is
#: compiled with 49 taps, a bucket for one layout only in that layout, and a forward configuration both
#: sliding along W at stride 1 and not at stride 2). A configuration no geometry reaches is not
#: compiled, which test_every_shipped_configuration_is_compiled reports.
DEPTHWISE_SHAPES = ("mid", "dw5x5-s2", "dw7x7")
#: (dtype, layout) of the edge shapes.
EDGE_SHAPES = {"conv1d": ("float16", "channels_last"), "conv1d-wide": ("bfloat16", "channels_first"),
               "unit": ("bfloat16", "channels_last"), VOLUME_SHAPE: ("bfloat16", "channels_last"),
               "1x1-s2": ("float16", "channels_first"),
               "dw-mult2": ("bfloat16", "channels_last"), "wino-b1": ("bfloat16", "channels_last"),
               PIXEL_VECTOR_SHAPE: ("bfloat16", "channels_first"), "3x3-s2": ("bfloat16", "channels_first"),
               PIPELINED_SHAPE: ("bfloat16", "channels_first"), "grouped-c4": ("bfloat16", "channels_last"),
               "grouped-c32": ("float16", "channels_first")}
#: The kernels whose tile rows are channels-first pixels (``PIX_VEC``).
PIXEL_VECTOR_KERNELS = ("gemm1x1", *names(CHANNELS_FIRST))
#: Edge shapes compiled for some kernels only.
SHAPE_KERNELS = {EPILOGUE_SHAPE: tuple(e.name for e in REGISTRY if e.transposed_epilogue),
                 PIXEL_VECTOR_SHAPE: PIXEL_VECTOR_KERNELS, "3x3-s2": names(CHANNELS_FIRST),
                 PIPELINED_SHAPE: names(CHANNELS_FIRST), "grouped-c4": names(GROUPED), "grouped-c32": names(GROUPED)}
#: Channels per group of the grouped kernels on the other geometries (``mid``: 16 groups of 4, which every
#: configuration's tile holds, several groups a tile).
GROUPED_CHANNELS = 4

#: Kernels whose plans run several kernels around one matrix multiply: the name of each launch (in job
#: ids) and the index of the matrix multiply (the launch that must use the matrix units).
LAUNCH_NAMES = {winograd.KERNEL: winograd.LAUNCHES, winograd_bwd_weight.KERNEL: winograd_bwd_weight.LAUNCHES}
#: Kernels whose launches after the first are more of their matrix multiply, not the split reduction: what
#: each of them is (job ids, numbered).
LATER_LAUNCHES = {"bwd_data_cf": "phase"}
MATRIX_LAUNCH = {winograd.KERNEL: winograd.GEMM_LAUNCH, winograd_bwd_weight.KERNEL: winograd_bwd_weight.GEMM_LAUNCH}


@dataclass(frozen=True)
class Job:
    """One kernel specialization to compile for one target."""

    target: str
    kernel: str  # candidate kernel (a registry name)
    config: str  # TileConfig.name
    dtype: str
    layout: str
    launch: int  # index of the launch in the plan (1: the split reduction)
    shape: str = "mid"

    @property
    def id(self) -> str:
        if self.kernel in LAUNCH_NAMES:
            what = f"{self.kernel}.{LAUNCH_NAMES[self.kernel][self.launch]}"
        elif self.launch == 0:
            what = self.kernel
        elif self.kernel in LATER_LAUNCHES:
            what = f"{self.kernel}.{LATER_LAUNCHES[self.kernel]}{self.launch}"
        else:
            what = f"{self.kernel}.reduce"
        shape = "" if self.shape == "mid" else f"-{self.shape}"
        return f"{self.target}-{what}{shape}-{self.config}-{specialization.TRITON_DTYPE[self.dtype]}-{self.layout[9:]}"

    @property
    def expects_matrix_instructions(self) -> bool:
        """16-bit dots must use the matrix units (float32 runs exact FMA; the reduction has no dot).

        Not the depthwise kernels: one input channel per output channel leaves no reduction across
        channels, so they are FMA stencils by design and no matrix instruction is expected."""
        if self.kernel in names(DEPTHWISE):
            return False
        matrix = self.kernel in LATER_LAUNCHES or self.launch == MATRIX_LAUNCH.get(self.kernel, 0)
        return matrix and self.dtype != "float32"


#: Kernels offered only for few channels per group (in every direction), and which channel count is few.
FEW_CHANNELS = {"few_channels_in": "in_channels", "few_channels_out": "out_channels",
                "few_channels_in_bwd_weight": "in_channels", "few_channels_out_bwd_weight": "out_channels",
                "few_channels_in_bwd_data": "in_channels", "few_channels_out_bwd_data": "out_channels"}
#: Forward kernels (Winograd's aside): compiled with a bias and an activation.
FORWARD_KERNELS = tuple(e.name for e in REGISTRY.for_direction("fwd") if e.name not in LAUNCH_NAMES)


def representative_problem(kernel: str, dtype: str, layout: str, arch: str, shape: str = "mid") -> ConvProblem | None:
    """The problem of geometry ``shape`` in the kernel's direction (forward: with bias and gelu; a data gradient on
    :data:`EPILOGUE_SHAPE`: with a transposed convolution's bias and gelu);
    None if the kernel does not apply (``gemm1x1`` takes the geometry with a 1x1 filter, stride 1)."""
    depthwise = kernel in names(DEPTHWISE)
    if shape.startswith("dw") and not depthwise:
        return None
    channels_first = kernel in names(CHANNELS_FIRST)
    if channels_first and layout != "channels_first":  # offered for channels-first problems only
        return None
    if shape.startswith("wino") and kernel not in LAUNCH_NAMES:
        return None
    if kernel not in SHAPE_KERNELS.get(shape, (kernel,)):
        return None
    fields = dict(SHAPES[shape], dtype=dtype, layout=layout, arch=arch)
    if depthwise:  # every geometry as a depthwise one
        fields["groups"] = fields["in_channels"]
    if kernel in names(GROUPED) and "groups" not in fields:  # as groups of GROUPED_CHANNELS
        if fields["in_channels"] < 2 * GROUPED_CHANNELS:
            return None
        fields["groups"] = fields["in_channels"] // GROUPED_CHANNELS
    if kernel in FEW_CHANNELS:  # the few-channel kernels compile on 3 channels (mid: 3 -> 64, 64 -> 3)
        fields[FEW_CHANNELS[kernel]] = min(fields[FEW_CHANNELS[kernel]], 3)
    if kernel == "gemm1x1":
        if shape == "1x1-s2":
            return None
        fields.update(filter_size=1, stride=1, padding=0)
    if kernel == "bwd_data_shuffle":  # the geometry's strides as its filter; a stride-1 geometry at stride 2
        stride = fields.get("stride", 1)
        stride = tuple(stride) if isinstance(stride, tuple) else (stride,) * len(fields["input_size"])
        if all(s == 1 for s in stride):
            stride = tuple(2 if size >= 2 else 1 for size in fields["input_size"])
        fields.update(filter_size=stride, stride=stride, padding=0, dilation=1)
    problem = ConvProblem("fwd", **{"stride": 1, "padding": 0, "dilation": 1, **fields})
    if problem.ndim == 3 and REGISTRY[kernel].issue(problem.with_direction(REGISTRY[kernel].directions[0])):
        return None  # a 1D/2D kernel
    if kernel == "conv3x3" and not implicit_gemm.three_by_three(problem):
        return None
    if kernel == winograd.KERNEL:  # only the geometries it is offered for
        return problem.replace(bias=True, activation="gelu") if winograd.applies(problem) else None
    if kernel == winograd_bwd_weight.KERNEL:
        problem = problem.with_direction("bwd_weight")
        return problem if winograd_bwd_weight.applies(problem) else None
    if kernel in FORWARD_KERNELS:  # without bias on the pixel-vector shape, whose check counts narrow loads
        return problem.replace(bias=shape != PIXEL_VECTOR_SHAPE, activation="gelu")
    problem = problem.with_direction(REGISTRY[kernel].directions[0])
    if kernel in FEW_CHANNELS and kernel not in few_channels.few_channels_kernels(problem):  # stride-2 data gradients
        return None
    if shape == EPILOGUE_SHAPE:  # a transposed convolution's epilogue: with bias and gelu, as the forward kernels
        fused = problem.replace(bias=True, activation="gelu")
        return fused if REGISTRY[kernel].issue(fused) is None else None
    return problem


def _depthwise_shapes(target: str, tab: configs.ArchTable, kernel: str, config, dtype: str, layout: str) -> list:
    """The :data:`DEPTHWISE_SHAPES` on which the table picks ``config``; for a configuration only an exact
    layer picks (a sweep winner: the swept layers are ConvNeXt's 7x7 ones), the 7x7 geometry."""
    family = REGISTRY.family_of(kernel)
    shapes = [shape for shape in DEPTHWISE_SHAPES
              if configs.select(tab, family, representative_problem(kernel, dtype, layout, target, shape)) == config]
    exact = config in tab.layers.get(family, {}).values()
    return shapes or (["dw7x7"] if exact else [])


def jobs(targets=tuple(TARGETS)) -> list[Job]:
    """Every distinct specialization the tables of ``targets`` ship (:func:`specialized_jobs`, each compiled
    once: the first job of each)."""
    return distinct_jobs(targets)[0]


def distinct_jobs(targets=tuple(TARGETS)) -> tuple[list[Job], dict[str, int]]:
    """:func:`jobs`, and how many launches the job list had before launches that specialise identically (same
    target, kernel, signature, constexprs, attributes and options: one compiled kernel) were merged."""
    kept, counts = distinct(specialized_jobs(targets, ranks=RANKS), key=lambda pair: pair[0])
    return [job for _, job in kept], counts


def specialized_jobs(targets=tuple(TARGETS), table=None, plan=make_plan, dtypes: tuple[str, ...] = configs.DTYPES,
                     ranks: tuple[int, ...] = PLANES) -> list[tuple[tuple, Job]]:
    """``((target, specialization key), job)`` of every launch the tables of ``targets`` ship: each
    configuration of each kernel of the registry, for every input dtype that can reach it and both layouts
    (register use differs most between layouts), on the ``mid`` geometry; plus each kernel on the edge
    geometries (:data:`SHAPES`) in the dtypes of ``dtypes``.

    ``table(target)`` and ``plan(problem, kernel, config, tab)`` default to this backend's (:func:`configs.table`,
    :func:`~conv_rdna.registry.make_plan`); a backend running these kernels with tables of its own passes its
    own, the input ``dtypes`` it takes and the spatial ``ranks`` it offers them for (1D/2D unless it says so: the
    3D edge shape is for a backend that takes 3D problems, as this one, :data:`~conv_rdna.registry.RANKS`)."""
    table = table or configs.table
    found: list[tuple[tuple, Job]] = []

    def add(target, tab, kernel, config, problem, shape):
        keys = specialization.plan_keys(problem, plan(problem, kernel, config, tab))
        for index, key in enumerate(keys):
            found.append(((target, key), Job(target, kernel, config.name, problem.dtype, problem.layout, index,
                                             shape)))

    for target in targets:
        tab = table(target)
        for kernel, family in ((e.name, e.family) for e in REGISTRY):
            for config, reached in configs.reachable_dtypes(tab, family, dtypes).items():
                for dtype in reached:
                    for layout in ("channels_last", "channels_first"):
                        shapes = ["mid", EPILOGUE_SHAPE] if REGISTRY[kernel].transposed_epilogue else ["mid"]
                        if kernel in names(DEPTHWISE):  # none: never chosen for this dtype and layout
                            shapes = _depthwise_shapes(target, tab, kernel, config, dtype, layout)
                        for shape in shapes:
                            problem = representative_problem(kernel, dtype, layout, target, shape)
                            if problem is not None:  # a kernel offered for one layout only
                                add(target, tab, kernel, config, problem, shape)
            for shape, (dtype, layout) in EDGE_SHAPES.items():
                if len(SHAPES[shape]["input_size"]) not in ranks:
                    continue
                problem = representative_problem(kernel, dtype, layout, target, shape)
                if problem is not None and dtype in dtypes:
                    add(target, tab, kernel, configs.select(tab, family, problem), problem, shape)
    return found


def space_jobs(targets=tuple(TARGETS), dtypes=("bfloat16",)) -> list[Job]:
    """The offline sweep's configurations (``data/sweep_space.json``) of ``targets``, to check before a GPU
    times them that they spill nothing and fit shared memory (``python -m conv_rdna.aot --sweep-space``).

    Each configuration of each kernel, for ``dtypes`` (the sweep's ``--dtype``; bf16 by default) and both
    layouts, on the geometries the tables' own configurations compile on (``mid``, and the depthwise kernels
    on every one of :data:`DEPTHWISE_SHAPES`, since the sweep times every configuration on every layer). Only
    the launch that takes the configuration (:data:`MATRIX_LAUNCH`, else the first): the split reduction
    and Winograd's transforms do not depend on it and are compiled with the tables' jobs.
    """
    found = []
    for target in targets:
        for kernel, family in ((e.name, e.family) for e in REGISTRY):
            shapes = DEPTHWISE_SHAPES if kernel in names(DEPTHWISE) else ("mid",)
            for config in sweep.space_configs(target, family):
                for dtype in dtypes:
                    for layout in ("channels_last", "channels_first"):
                        for shape in shapes:
                            if representative_problem(kernel, dtype, layout, target, shape) is not None:
                                found.append(Job(target, kernel, config.name, dtype, layout,
                                                 MATRIX_LAUNCH.get(kernel, 0), shape))
    return found


# ---- compiling one job -----------------------------------------------------------------------------


def _find_config(tab: configs.ArchTable, kernel: str, name: str) -> configs.TileConfig:
    """The configuration called ``name``: one the table ships, else one of the sweep space (:func:`space_jobs`)."""
    family = REGISTRY.family_of(kernel)
    return next(c for c in (*tab.configs(family), *sweep.space_configs(tab.name, family)) if c.name == name)


def _amd_stats(asm: str) -> dict:
    def field(name: str) -> int:
        match = re.search(rf"^\s*\.{name}:\s+(\d+)", asm, re.MULTILINE)
        return int(match.group(1)) if match else -1

    return dict(registers=field("vgpr_count"), sgprs=field("sgpr_count"),
                spills=max(field("vgpr_spill_count"), 0) + max(field("sgpr_spill_count"), 0),
                scratch_bytes=field("private_segment_fixed_size"))


def _ptxas_stats(log: str) -> dict:
    """ptxas's figures under the names the AMD figures use (``sgprs`` do not exist on NVIDIA)."""
    stats = ptxas_stats(log)
    return dict(registers=stats["registers"], sgprs=0, spills=stats["spill_bytes"], scratch_bytes=stats["stack_bytes"])


def compile_launch(launch: Launch, dtypes: dict[str, str], target: str):
    """Compile one launch for ``target``; return ``(compiled kernel, statistics dict)``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, constexprs, attrs = specialization.of_launch(launch, dtypes)
    backend, arch, warp = TARGETS[target]
    log = io.StringIO()
    triton.knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log
    with contextlib.redirect_stdout(log):
        if backend == "cuda":
            triton.knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers and spills
        compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attrs),
                                  target=GPUTarget(backend, arch, warp),
                                  options=dict(num_warps=launch.num_warps, num_stages=launch.num_stages))
    asm = compiled.asm["amdgcn" if backend == "hip" else "ptx"]
    stats = _amd_stats(asm) if backend == "hip" else _ptxas_stats(log.getvalue())
    if backend == "cuda" and re.search(r"^\s*\.local\b", asm, re.MULTILINE):
        stats["scratch_bytes"] = max(stats["scratch_bytes"], 1)
    stats.update(shared=compiled.metadata.shared, matrix=sorted(set(re.findall(MATRIX_PATTERNS[backend], asm))),
                 narrow={access: len(re.findall(pattern, asm)) for access, pattern in NARROW_PATTERNS[backend].items()},
                 async_copies=len(re.findall(ASYNC_COPY_PATTERN, asm)) if backend == "cuda" else 0)
    return compiled, stats


def compile_job(job: Job) -> dict:
    """Compile one job; return its statistics (or the error) as a plain dict."""
    started = time.perf_counter()
    result = dict(job=asdict(job), id=job.id, expects_matrix=job.expects_matrix_instructions,
                  shared_limit=spec(job.target).shared_memory_bytes)
    try:
        tab = configs.table(job.target)
        config = _find_config(tab, job.kernel, job.config)
        problem = representative_problem(job.kernel, job.dtype, job.layout, job.target, job.shape)
        launch = make_plan(problem, job.kernel, config, tab).launches[job.launch]
        _, stats = compile_launch(launch, specialization.role_dtypes(problem), job.target)
        result.update(ok=True, pipelined=bool(dict(launch.constexprs).get("PIPELINED")),
                      estimated_shared=config.shared_bytes(job.dtype)
                      if job.launch == MATRIX_LAUNCH.get(job.kernel, 0) else 0, **stats)
    except Exception as exc:  # reported per job; the test fails on it
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def problems_of(result: dict) -> list[str]:
    """What is wrong with a compiled job (empty: nothing)."""
    issues = compile_failure(result)
    if issues:
        return issues
    if result["expects_matrix"] and not result["matrix"]:
        issues.append("no matrix instruction in the assembly")
    if result["spills"] != 0:
        issues.append(f"{result['spills']} spills (or unknown: -1)")
    if result["scratch_bytes"] != 0:
        issues.append(f"{result['scratch_bytes']} bytes of scratch / local memory")
    if result["shared"] > result["shared_limit"]:
        issues.append(f"shared memory {result['shared']} > limit {result['shared_limit']}")
    if result["shared"] > result["estimated_shared"] and result["job"]["launch"] == MATRIX_LAUNCH.get(
            result["job"]["kernel"], 0):
        issues.append(f"shared memory {result['shared']} > the tables' estimate {result['estimated_shared']}")
    if result["pipelined"] and not result["async_copies"]:
        issues.append("the pipelined loop issues no asynchronous copy")
    job = result["job"]
    if job["shape"] == PIXEL_VECTOR_SHAPE and job["launch"] == 0:
        for access in PIXEL_VECTOR_ACCESSES[TARGETS[job["target"]][0]]:
            if result["narrow"][access]:
                issues.append(f"{result['narrow'][access]} one-element global {access}s of channels-first pixels")
    return issues


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_rdna.aot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="repeatable; default: all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH as a JSON list")
    parser.add_argument("--sweep-space", action="store_true",
                        help="compile the offline sweep's configurations (data/sweep_space.json) instead of the "
                             "tables' (bf16, both layouts)")
    args = parser.parse_args(argv)
    if interpreting():
        parser.error("unset TRITON_INTERPRET: the compile checks need Triton's compiler, not its interpreter")
    targets = tuple(args.target or TARGETS)
    if args.sweep_space:
        todo = space_jobs(targets)
    else:
        todo, counts = distinct_jobs(targets)
        print(f"{counts['jobs']} launches, {counts['compiles']} distinct specializations compiled", file=sys.stderr)
    return report(compile_all(compile_job, todo, args.jobs), args.json,
                  f"{'job':64} {'regs':>5} {'spill':>5} {'scr':>4} {'shared':>7} {'limit':>7}  matrix / issues", _row,
                  problems_of)


def _row(r: dict) -> str:
    """A compiled job's line of the report: registers, spills, scratch, shared memory, the matrix instruction."""
    matrix = r["matrix"][0].split(".")[0] if r["matrix"] else "-"
    return (f"{r['id']:64} {r['registers']:5} {r['spills']:5} {r['scratch_bytes']:4} {r['shared']:7} "
            f"{r['shared_limit']:7}  {matrix} {'; '.join(problems_of(r))}")

if __name__ == "__main__":
    sys.exit(main())
