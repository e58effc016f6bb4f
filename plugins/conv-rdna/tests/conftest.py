"""Test setup: where the kernels run.

By default (CI) everything runs on the CPU: the kernels through Triton's interpreter, switched on here
before anything imports triton, and the compile checks (test_compile.py) in a subprocess without it.

``CONV_RDNA_TEST_DEVICE=cuda python -m pytest tests/test_conformance.py tests/test_kernels.py`` runs the
conformance suite and the kernel checks compiled, on a GPU (ROCm or CUDA) instead.
"""

import os

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")

if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
