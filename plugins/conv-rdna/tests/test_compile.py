"""Every shipped configuration of every kernel compiles for gfx1100, gfx1201 and sm_90, on the CPU.

The job list (:func:`conv_rdna.aot.jobs`: each configuration of each kernel, per reachable dtype and
layout) is computed here; the compiling happens in one ``python -m conv_rdna.aot`` subprocess without
``TRITON_INTERPRET`` (this process has it set, so its kernels are interpreted functions), with one
compile process per core. Each job must use the matrix instructions (16-bit operands: ``v_wmma*`` on
RDNA, ``wgmma`` / ``mma.sync`` on Hopper), spill nothing, use no scratch / local memory, and stay
within the architecture's shared-memory limit and the tables' own estimate of it. A channels-first kernel
that takes its pipelined loop (``PIPELINED``) must issue asynchronous copies.
"""

from __future__ import annotations


import re

import pytest
from conv_core.testing.plugin_checks import compile_check_tests
from conv_core.problem import ConvProblem
from conv_rdna import aot, configs, registry

JOBS = aot.jobs()


#: The module's fixture (the compile run, 2-3 s per job and core; more under contention) and a test per job.
compiled, test_compiles_cleanly = compile_check_tests("conv_rdna.aot", JOBS, aot.problems_of, 4, 900)


def test_every_shipped_configuration_is_compiled():
    """The job list covers each configuration each compile target's table can choose, for every kernel."""
    for target in aot.TARGETS:
        tab = configs.table(target)
        for kernel, family in ((e.name, e.family) for e in registry.REGISTRY):
            shipped = {c.name for c in tab.configs(family)}
            compiled = {job.config for job in JOBS if job.target == target and job.kernel == kernel}
            assert shipped == compiled, (target, kernel)


def test_other_rdna_architectures_share_a_compiled_table():
    """gfx1151 and gfx1200 take their configurations from gfx1100 and gfx1201, which are compiled."""
    for arch, base in (("gfx1151", "gfx1100"), ("gfx1200", "gfx1201")):
        assert configs.table(arch).families == configs.table(base).families
        assert configs.table(arch).source == base


def test_channels_first_pixels_are_checked_for_vectors_on_every_target():
    """problems_of's vector check (aot.PIXEL_VECTOR_SHAPE) has a job for each kernel it covers on each target."""
    checked = {(job.target, job.kernel) for job in JOBS if job.shape == aot.PIXEL_VECTOR_SHAPE and job.launch == 0}
    assert checked == {(target, kernel) for target in aot.TARGETS for kernel in aot.PIXEL_VECTOR_KERNELS}


@pytest.mark.parametrize("backend, access, instruction, narrow", [
    ("cuda", "load", "ld.global.b16 {%rs1}, [%rd2];", True),
    ("cuda", "load", "ld.global.nc.L1::evict_last.u16 %rs3, [%rd4];", True),
    ("cuda", "load", "ld.global.v2.b32 {%r1, %r2}, [%rd2];", False),
    ("cuda", "load", "ld.global.v4.b16 {%rs1, %rs2, %rs3, %rs4}, [%rd2];", False),
    ("cuda", "store", "st.global.b16 [%rd1], %rs2;", True),
    ("cuda", "store", "st.global.v4.b32 [%rd1], {%r1, %r2, %r3, %r4};", False),
    ("hip", "load", "global_load_u16 v1, v[2:3], off", True),
    ("hip", "load", "global_load_d16_hi_b16 v1, v[2:3], off", True),
    ("hip", "load", "global_load_b64 v[1:2], v[2:3], off", False),
    ("hip", "store", "global_store_b16 v[2:3], v1, off", True),
    ("hip", "store", "global_store_b128 v[2:3], v[4:7], off", False),
])
def test_narrow_access_patterns(backend, access, instruction, narrow):
    assert bool(re.search(aot.NARROW_PATTERNS[backend][access], instruction)) is narrow


@pytest.mark.parametrize("instruction, copy", [
    ("cp.async.cg.shared.global [%r1+0], [%rd2+0], 0x10, %r3;", True),
    ("cp.async.ca.shared.global [%r1+0], [%rd2+0], 0x4, %r3;", True),
    ("cp.async.commit_group ;", False),
    ("cp.async.wait_group 0x1;", False),
])
def test_async_copy_pattern(instruction, copy):
    assert bool(re.search(aot.ASYNC_COPY_PATTERN, instruction)) is copy


def test_channels_first_kernels_are_compiled_in_both_loops_on_hopper(compiled):
    """sm_90 has asynchronous copies: each channels-first kernel is compiled with its pipelined loop
    (aot.PIPELINED_SHAPE; the weight gradient also on ``mid``) and with its register prefetch."""
    loops = {(r["job"]["kernel"], r["pipelined"]) for r in compiled.values()
             if r.get("ok") and r["job"]["target"] == "sm_90" and r["job"]["launch"] == 0}
    assert {(kernel, pipelined) for kernel in registry.CHANNELS_FIRST_KERNELS.values()
            for pipelined in (True, False)} <= loops


def test_matrix_instruction_names(compiled):
    """RDNA 16-bit kernels use WMMA; Hopper ones wgmma (warp-group MMA), except tiles of fewer than 64 rows (the
    grouped weight gradient's 16-row tiles), which a warp group cannot issue and Triton runs on ``mma.sync``."""
    for result in compiled.values():
        if result["expects_matrix"] and result.get("ok"):
            if result["job"]["target"].startswith("gfx"):
                wanted = ("v_wmma_f32_16x16x16",)
            else:
                tile = re.search(r"-m(\d+)n\d+k", result["id"])  # the configuration's BLOCK_M
                narrow = tile is not None and int(tile.group(1)) < 64
                wanted = ("wgmma.mma_async", "mma.sync") if narrow else ("wgmma.mma_async",)
            assert any(m.startswith(wanted) for m in result["matrix"]), result["id"]


def test_kernels_with_a_depth_axis_are_compiled_in_3d_on_every_target():
    """aot.VOLUME_SHAPE compiles each kernel that takes 3D with its depth sizes as arguments (in 2D the JIT compiles
    them in as 1s), but gemm1x1, whose 3D launch merges the depth into its pixels and is its 2D specialization."""
    clip = ConvProblem("fwd", 2, 8, 8, (4, 6, 6), 3, 1, 1, 1)
    clips = {"depthwise": clip.replace(groups=8), "shuffle": clip.replace(filter_size=2, stride=2, padding=0)}

    def clip_for(kernel: str) -> ConvProblem:
        return next((c for word, c in clips.items() if word in kernel), clip)
    volumes = [e.name for e in registry.REGISTRY if e.name != "gemm1x1"
               and e.issue(clip_for(e.name).with_direction(e.directions[0])) is None]
    compiled = {(job.target, job.kernel) for job in JOBS if job.shape == aot.VOLUME_SHAPE and job.launch == 0}
    assert len(volumes) == 8 and compiled == {(target, kernel) for target in aot.TARGETS for kernel in volumes}


def test_a_backend_taking_1d_2d_gets_no_3d_job():
    """conv-cdna runs these kernels on 1D/2D problems only: the job list it builds (ranks left at 1D/2D) has none."""
    assert all(len(aot.SHAPES[job.shape]["input_size"]) < 3 for _, job in aot.specialized_jobs(("sm_90",)))
