"""conv-core's conformance kit on the cdna backend: interpreted on the CPU with gfx942's tile shapes (the table
``CONV_CDNA_ARCH`` names, gfx942 by default), or compiled on a GPU (see conftest.py).

Every candidate the backend returns for the kit's edge cases and seeded random problems is checked against the
float64 reference (poisoned ``out``, fresh result, determinism, untouched operands), in every direction and both
layouts (few random problems: the kernels are conv-rdna's, whose own suite draws 24; here the tiles are what is
new, and test_kernels.py runs each kernel with each table's). On the CPU only float16 runs: bfloat16 dots are
upcast under the interpreter (conv-rdna's kernels), so they would re-check the same path; the GPU run covers
bfloat16.
"""

import os

from conv_core.testing import ConformanceSuite

DEVICE = os.environ.get("CONV_CDNA_TEST_DEVICE", "cpu")


class TestCdnaConformance(ConformanceSuite):
    backend = "cdna"
    device = DEVICE
    dtypes = ("float16",) if DEVICE == "cpu" else ("float16", "bfloat16")
    layouts = ("channels_first", "channels_last")
    directions = ("fwd", "bwd_data", "bwd_weight")
    random_count = 4
    max_macs = 20_000
