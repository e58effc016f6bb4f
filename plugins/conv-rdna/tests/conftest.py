"""Test setup: Triton's CPU interpreter, switched on before anything imports triton.

Every test here runs on the CPU: kernels through the interpreter, and the compile checks
(test_compile.py) in subprocesses without it.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"
