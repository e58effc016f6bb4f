"""Test setup: where the kernels run.

By default (CI) everything runs on the CPU: the kernels through Triton's interpreter with gfx942's tables (or those
``CONV_CDNA_ARCH`` names), switched on here before anything imports triton, and the compile checks (test_compile.py)
in a subprocess without it.

``CONV_CDNA_TEST_DEVICE=cuda CONV_CDNA_ARCH=gfx942 python -m pytest tests/test_conformance.py`` runs the conformance
suite compiled on a GPU instead: on an AMD Instinct GPU with its own tables, on any other with gfx942's tile shapes.
"""

import os

DEVICE = os.environ.get("CONV_CDNA_TEST_DEVICE", "cpu")

if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
