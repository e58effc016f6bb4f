"""Every shipped configuration of every kernel compiles for gfx1100, gfx1201 and sm_90, on the CPU.

The job list (:func:`conv_rdna.aot.jobs`: each configuration of each kernel, per reachable dtype and
layout) is computed here; the compiling happens in one ``python -m conv_rdna.aot`` subprocess without
``TRITON_INTERPRET`` (this process has it set, so its kernels are interpreted functions), with one
compile process per core. Each job must use the matrix instructions (16-bit operands: ``v_wmma*`` on
RDNA, ``wgmma`` / ``mma.sync`` on Hopper), spill nothing, use no scratch / local memory, and stay
within the architecture's shared-memory limit and the tables' own estimate of it.
"""

from __future__ import annotations


import pytest
from conv_core.aot import compile_in_subprocess
from conv_rdna import aot, configs, plan

JOBS = aot.jobs()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, dict]:
    timeout = max(900, 4 * len(JOBS))  # 2-3 s per job and core; more under contention
    return {r["id"]: r for r in compile_in_subprocess("conv_rdna.aot", tmp_path_factory.mktemp("aot"), timeout)}


@pytest.mark.parametrize("job", JOBS, ids=[job.id for job in JOBS])
def test_compiles_cleanly(job, compiled):
    result = compiled.get(job.id)
    assert result is not None, f"{job.id} was not compiled"
    assert aot.problems_of(result) == [], result


def test_every_shipped_configuration_is_compiled():
    """The job list covers each configuration each compile target's table can choose, for every kernel."""
    for target in aot.TARGETS:
        tab = configs.table(target)
        for kernel, family in plan.KERNELS.items():
            shipped = {c.name for c in tab.configs(family)}
            compiled = {job.config for job in JOBS if job.target == target and job.kernel == kernel}
            assert shipped == compiled, (target, kernel)


def test_other_rdna_architectures_share_a_compiled_table():
    """gfx1151 and gfx1200 take their configurations from gfx1100 and gfx1201, which are compiled."""
    for arch, base in (("gfx1151", "gfx1100"), ("gfx1200", "gfx1201")):
        assert configs.table(arch).families == configs.table(base).families
        assert configs.table(arch).source == base


def test_matrix_instruction_names(compiled):
    """RDNA 16-bit kernels use WMMA; Hopper ones wgmma (warp-group MMA)."""
    for result in compiled.values():
        if result["expects_matrix"] and result.get("ok"):
            wanted = "v_wmma_f32_16x16x16" if result["job"]["target"].startswith("gfx") else "wgmma.mma_async"
            assert any(m.startswith(wanted) for m in result["matrix"]), result["id"]
