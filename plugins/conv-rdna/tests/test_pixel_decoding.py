"""The weight gradients' pixel decoding (``kernels.common.divide`` with ``common.divisor``'s magic numbers)
against integer division, on the host's arithmetic and in an interpreted kernel.

The kernels divide flat pixel indices by ``Q`` and ``P`` with a multiply-high and a shift; a wrong magic
number would read the wrong pixels only for some sizes and indices, so the identity is checked here over
divisors of every bit length (powers of two and their neighbours included) and indices up to 2**31 - 1.
"""

import os

import pytest
import torch
import triton
import triton.language as tl
from conv_rdna.kernels.common import divide, pixel_coords
from conv_rdna.plans.common import divisor

DEVICE = os.environ.get("CONV_RDNA_TEST_DEVICE", "cpu")
DIVISORS = sorted({1, 3, 7, 49, 56, 196, 3136, 12544, 50176, 2**31 - 1}
                  | {d + e for k in range(1, 31) for e in (-1, 0, 1) for d in (2**k,) if d + e >= 1})
INDICES = [0, 1, 2, 5, 48, 49, 1000, 2**16 + 1, 2**24 - 1, 2**30 + 12345, 2**31 - 2, 2**31 - 1]


def divided(j: int, magic: int, shift: int) -> int:
    """``divide``'s arithmetic in Python's integers (``magic`` reinterpreted as unsigned)."""
    return (((j * (magic % 2**32)) >> 32) + j) >> shift


@pytest.mark.parametrize("d", DIVISORS)
def test_magic_numbers_divide(d):
    magic, shift = divisor(d)
    assert -(2**31) <= magic < 2**31
    assert all(divided(j, magic, shift) == j // d for j in INDICES + [d - 1, d, d + 1, 2 * d - 1, 2 * d])


@triton.jit
def _decode(j_ptr, out_ptr, P, Q, P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT, LANES: tl.constexpr):
    lane = tl.arange(0, LANES)
    n, p, q = pixel_coords(tl.load(j_ptr + lane), P, Q, P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT)
    tl.store(out_ptr + lane, n)
    tl.store(out_ptr + LANES + lane, p)
    tl.store(out_ptr + 2 * LANES + lane, q)


@triton.jit
def _divide(j_ptr, out_ptr, MAGIC, SHIFT, LANES: tl.constexpr):
    lane = tl.arange(0, LANES)
    tl.store(out_ptr + lane, divide(tl.load(j_ptr + lane), MAGIC, SHIFT))


@pytest.mark.parametrize("d", [1, 2, 3, 7, 49, 3136, 2**30 + 3])
def test_kernel_divides(d):
    j = torch.tensor(INDICES + [0, 0, 0, 0], dtype=torch.int32, device=DEVICE)
    out = torch.full_like(j, -1)
    _divide[(1,)](j, out, *divisor(d), LANES=16)
    assert out.tolist() == [v // d for v in j.tolist()]


@pytest.mark.parametrize("p_size, q_size", [(7, 7), (3, 5), (1, 1), (4, 100), (56, 56), (1, 13)])
def test_kernel_decodes_pixels(p_size, q_size):
    j = torch.tensor([0, 1, 6, 7, 48, 49, 50, 97, 98, 3135, 3136, 10**6, 2**20 + 7, 2**28, 2**31 - 2, 2**31 - 1],
                     dtype=torch.int32, device=DEVICE)
    out = torch.full((3, 16), -1, dtype=torch.int32, device=DEVICE)
    _decode[(1,)](j, out, p_size, q_size, *divisor(p_size), *divisor(q_size), LANES=16)
    flat = j.long().cpu()
    expected = torch.stack([flat // (p_size * q_size), (flat // q_size) % p_size, flat % q_size]).to(torch.int32)
    assert torch.equal(out.cpu(), expected)
