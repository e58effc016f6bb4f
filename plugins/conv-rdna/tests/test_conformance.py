"""conv-core's conformance kit on the rdna backend, interpreted on the CPU (or on a GPU: see conftest.py).

Every candidate the backend returns for the kit's edge cases and seeded random problems is checked
against the float64 reference (poisoned ``out``, fresh result, determinism, untouched operands),
plus the public API on strided tensors, metadata stability and coverage. On the CPU bfloat16 is left
out: under the interpreter it only re-checks the float32 path (the kernels upcast bf16 operands
there); test_kernels.py checks the interpreter workaround once, and the GPU run covers bf16.
"""

import os

from conv_core.testing import ConformanceSuite

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")


class TestRdnaConformance(ConformanceSuite):
    backend = "rdna"
    device = DEVICE
    dtypes = ("float16", "float32") if DEVICE == "cpu" else ("float16", "bfloat16", "float32")
    layouts = ("channels_first", "channels_last")
    directions = ("fwd", "bwd_data", "bwd_weight")
    random_count = 24
    max_macs = 20_000
