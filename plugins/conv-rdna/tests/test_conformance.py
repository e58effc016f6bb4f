"""conv-core's conformance kit on the rdna backend, interpreted on the CPU (or on a GPU: see conftest.py).

Every candidate the backend returns for the kit's edge cases and seeded random problems is checked
against the float64 reference (poisoned ``out``, fresh result, determinism, untouched operands),
plus the public API on strided tensors, metadata stability and coverage. On the CPU bfloat16 is left
out: under the interpreter it only re-checks the float32 path (the kernels upcast bf16 operands
there); test_kernels.py checks the interpreter workaround once, and the GPU run covers bf16.
"""

import os

from conv_core.problem import ConvProblem
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
    #: Data gradients whose filter is the stride (bwd_data_shuffle's), which random problems seldom draw: 1D to 3D,
    #: both layouts, a padded one, one with rows past the last window, two with an epilogue.
    extra_problems = tuple(ConvProblem("bwd_data", 2, cin, cout, size, size_filter, size_filter, padding, 1,
                                       dtype=dtype, weight_dtype=dtype, out_dtype=dtype, layout=layout)
                           for cin, cout, size, size_filter, padding, dtype, layout in (
        (6, 10, (9, 8), (2, 2), 0, "float16", "channels_last"),
        (5, 7, (9, 7), (3, 2), ((1, 0), (0, 1)), "float32", "channels_first"),
        (4, 6, (3, 4, 5), (1, 2, 2), 0, "float16", "channels_first"),
        (3, 9, (17,), (4,), 0, "float32", "channels_last"),
    )) + (  # with a transposed convolution's epilogue (bias per channel of dx, activation)
        ConvProblem("bwd_data", 2, 6, 10, (8, 8), (2, 2), (2, 2), 0, 1, dtype="bfloat16", layout="channels_last",
                    bias=True, activation="gelu"),
        ConvProblem("bwd_data", 2, 4, 6, (9,), (3,), (3,), 0, 1, groups=2, dtype="float32",
                    layout="channels_first", bias=True),
    )
