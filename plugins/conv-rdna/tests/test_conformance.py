"""conv-core's conformance kit on the rdna backend, interpreted on the CPU (see conftest.py).

Every candidate the backend returns for the kit's edge cases and seeded random problems is checked
against the float64 reference (poisoned ``out``, fresh result, determinism, untouched operands),
plus the public API on strided tensors, metadata stability and coverage. bfloat16 is left out:
under the interpreter it only re-checks the float32 path (the kernels upcast bf16 operands there);
bf16 itself is proven on the GPU and by the compile checks.
"""

from conv_core.testing import ConformanceSuite


class TestRdnaConformance(ConformanceSuite):
    backend = "rdna"
    device = "cpu"
    dtypes = ("float16", "float32")
    layouts = ("channels_first", "channels_last")
    directions = ("fwd", "bwd_data", "bwd_weight")
    random_count = 24
    max_macs = 20_000
