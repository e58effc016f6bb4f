"""Every shipped configuration of every kernel compiles for gfx90a, gfx942 and gfx950, on the CPU, with the JIT's
specialization, and its assembly shows what the tables intend (:func:`conv_cdna.aot.problems_of`): the chip's 16-bit
MFMA instruction, no spill or scratch, LDS within the chip's limit, VGPRs + AGPRs within 512 a lane, the main loop
pipelined as configured. docs/cdna-compile.md's table is this run's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import triton
from conv_cdna import aot, configs
from conv_core.testing.plugin_checks import compile_check_tests
from conv_rdna.api import REGISTRY

JOBS = aot.jobs()
DOC = Path(__file__).parents[1] / "docs" / "cdna-compile.md"
TABLE = re.compile(r"<!-- compile table: begin -->\n(.*)<!-- compile table: end -->", re.DOTALL)

#: The module's fixture (one compile run, under a second a job and core) and a test per job.
compiled, test_compiles_cleanly = compile_check_tests("conv_cdna.aot", JOBS, aot.problems_of, 2, 900)


def test_every_shipped_configuration_is_compiled():
    for target in configs.TARGETS:
        tab = configs.table(target)
        for kernel, family in ((e.name, e.family) for e in REGISTRY):
            shipped = {c.name for c in tab.configs(family)}
            built = {job.config for job in JOBS if job.target == target and job.kernel == kernel}
            assert shipped == built, (target, kernel)


def test_jobs_carry_the_chips_options():
    for job in JOBS[:50]:
        launch, _ = aot.launch_of(job)
        assert dict(launch.extra_options)["matrix_instr_nonkdim"] == 16


@pytest.mark.parametrize("ttgir, buffers, carried", [
    ("%a = ttg.local_alloc : () -> !ttg.memdesc<1x128x32xbf16, #shared, #smem, mutable>\n"
     "%r:4 = scf.for %i = %c0 to %n step %c1 iter_args(%x = %acc, %y = %a) -> (tensor<128x64xf32, #mma>, "
     "!ttg.memdesc<128x32xbf16, #shared, #smem, mutable>)  : i32 {", 1, True),
    ("%r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %acc) -> (tensor<128x64xf32, #mma>)  : i32 {", 0, False),
])
def test_pipelining_is_read_from_the_loop(ttgir, buffers, carried):
    assert aot.pipelining(ttgir) == dict(lds_buffers=buffers, carries_lds=carried)


@pytest.mark.skipif(triton.__version__ != "3.6.0", reason="the figures in docs/cdna-compile.md are triton 3.6.0's")
def test_the_documented_table_is_this_run(compiled):
    documented = TABLE.search(DOC.read_text())
    assert documented, f"{DOC} lacks the compile-table markers"
    assert documented.group(1) == aot.markdown(list(compiled.values())), \
        "python -m conv_cdna.aot --markdown TABLE.md, then paste it into docs/cdna-compile.md"
