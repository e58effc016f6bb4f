"""conv-core takes dead work out of Triton's interpreter (:mod:`conv_core.interpreter`): the same bits come out
of conv-rdna's kernels with it and without it (``CONV_CORE_LEAN_INTERPRETER=0``), and it is in effect.

Each side runs in a process of its own, since the change holds for the process once made."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu") != "cpu",
                                reason="the interpreter runs on the CPU")

#: Kernels with nested @triton.jit calls and 32-bit index arithmetic, in each direction.
SCRIPT = """
import sys, torch, conv_core
from triton.runtime import interpreter
torch.manual_seed(0)
x = torch.randn(2, 6, 7, 5, dtype=torch.float16).to(memory_format=torch.channels_last).requires_grad_()
w = torch.randn(8, 6, 3, 3, dtype=torch.float16).to(memory_format=torch.channels_last).requires_grad_()
y = conv_core.conv2d(x, w, stride=2, padding=1, backend="rdna")
y.backward(torch.randn_like(y))
d = torch.randn(2, 6, 9, 9, dtype=torch.float16)
wd = torch.randn(6, 1, 3, 3, dtype=torch.float16)
out = {
    "fwd": y.detach(), "bwd_data": x.grad, "bwd_weight": w.grad,
    "depthwise": conv_core.conv2d(d, wd, padding=1, groups=6, backend="rdna"),
    "sanitize_overflow": interpreter.interpreter_builder.options.sanitize_overflow,
}
torch.save(out, sys.argv[1])
"""


def run(tmp_path, lean: str) -> dict:
    path = tmp_path / f"lean{lean}.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CONV_CORE_LEAN_INTERPRETER": lean}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(path)


def test_the_same_bits_with_and_without_the_lean_interpreter(tmp_path):
    lean, shipped = run(tmp_path, "1"), run(tmp_path, "0")
    assert lean.pop("sanitize_overflow") is False and shipped.pop("sanitize_overflow") is True
    for name, result in shipped.items():
        assert result.isfinite().all() and result.abs().max() > 0, name
        assert torch.equal(lean[name], result), name
