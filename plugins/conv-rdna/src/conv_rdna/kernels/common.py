"""Helpers shared by the kernels: matrix multiply-accumulate, fused activation, cast for the store.

``INTERPRET`` is a constexpr the host sets when the kernels run under Triton's CPU interpreter
(``TRITON_INTERPRET=1``). The interpreter has two bfloat16 bugs (see the plugin README): ``tl.dot``
multiplies bf16 operands as integers, and float32 -> bf16 casts truncate instead of rounding to
nearest even. With ``INTERPRET`` set, :func:`mma` upcasts operands to float32 (exact for fp16 and bf16:
products of two 11-bit or 8-bit significands fit in float32) and :func:`cast_for_store` rounds to
bf16 explicitly. Compiled kernels never take those branches.
"""

import inspect

import triton
import triton.language as tl

#: The integer parameters, by name, whose values change with the batch size or the image size: extents and
#: pixel counts, their magic-number divisors, chunk and split sizes. Triton's JIT would compile a kernel
#: again for each new value of 1 or change of divisibility by 16 among them; :func:`jit_any_size` tells it
#: not to specialise on them. Strides stay specialised: in channels-last they are multiples of the channel
#: count, so their alignment (which the vector loads need) is a fact of the layer, not of the image. So do the
#: depth sizes (``D``, ``OD``, ``TD``, ``D_PH``): below 3D they are 1, which the JIT compiles in as a constant
#: so that the depth arithmetic folds away; a 3D clip length compiles a kernel per class (1, a multiple of 16
#: or neither), not per length.
SIZES = frozenset({
    "BATCH", "H", "W", "P", "Q", "PQ", "HW", "H_PH", "W_PH", "N0", "A_OFF", "T", "TILES_H", "TILES_W", "TILES",
    "TILES_Q", "P_MAGIC", "P_SHIFT", "Q_MAGIC", "Q_SHIFT", "PIX_PER_SPLIT", "BLOCKS_PER_SPLIT",
    "ROWS_PER_SPLIT", "TILES_PER_SPLIT", "SPLITS",
})


def jit_any_size(fn):
    """``triton.jit`` for a kernel whose parameters named in :data:`SIZES` are left unspecialised, so that a
    new batch or image size runs the kernel already compiled for the layer."""
    return triton.jit(fn, do_not_specialize=[name for name in inspect.signature(fn).parameters if name in SIZES])


def unspecialized(kernel) -> frozenset[str]:
    """The parameters ``kernel`` (a JIT function, or the interpreter's) is not specialised on."""
    listed = getattr(kernel, "do_not_specialize", None)
    if listed is None:  # Triton's interpreter keeps the decorator's arguments
        listed = getattr(kernel, "kwargs", {}).get("do_not_specialize") or ()
    return frozenset(kernel.arg_names[item] if isinstance(item, int) else item for item in listed)


@triton.jit
def mma(a, b, acc, INTERPRET: tl.constexpr):
    """``acc + a @ b`` with float32 accumulation; float32 operands stay exact ("ieee", never tf32)."""
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision="ieee")


@triton.jit
def activation(x, ACTIVATION: tl.constexpr):
    """The activations of ``conv_core.activations``, in float32 (``""``: identity)."""
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == "relu6":
        x = tl.minimum(tl.maximum(x, 0.0), 6.0)
    elif ACTIVATION == "gelu":  # exact: x * Phi(x)
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # tanh(u) = 1 - 2 / (exp(2u) + 1): finite for every u
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
    elif ACTIVATION == "silu":
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def cast_for_store(x, ptr, INTERPRET: tl.constexpr):
    """``x`` (float32) converted to the element type of ``ptr``, rounding to nearest even."""
    if INTERPRET:
        if ptr.dtype.element_ty == tl.bfloat16:  # the interpreter truncates: round the float32 bits first
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(ptr.dtype.element_ty)


@triton.jit
def add_bias_and_activate(acc, bias_ptr, offs_n, n_ok, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    """The forward epilogue's arithmetic on a ``[pixels, output channels]`` float32 tile: the bias of the
    columns (``bias_ptr``: the group's first, ``offs_n``: the columns within the group), then the activation.
    The store, with its one rounding, stays with the caller: computing the output offsets before this would
    keep them live across it."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return activation(acc, ACTIVATION)


@triton.jit
def forward_tile(BATCH, P, Q, K_G, STRIDE_H, STRIDE_W, PAD_H, PAD_W, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr, ROW_VEC: tl.constexpr):
    """:func:`volume_tile` of a 2D convolution (depth 1): ``(offs_m, m_ok, n, p, q, h0, w0, offs_n, n_ok)``."""
    offs_m, m_ok, n, od, p, q, z0, h0, w0, offs_n, n_ok = volume_tile(BATCH, 1, P, Q, K_G, 1, STRIDE_H, STRIDE_W, 1,
                                                                       PAD_H, PAD_W, BLOCK_M, BLOCK_N, GROUP_M,
                                                                       ROW_VEC)
    return offs_m, m_ok, n, p, q, h0, w0, offs_n, n_ok


@triton.jit
def volume_tile(BATCH, OD, P, Q, K_G, STRIDE_D, STRIDE_H, STRIDE_W, PAD_D1, PAD_H, PAD_W, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, ROW_VEC: tl.constexpr):
    """This program's tile of a forward implicit GEMM (``program_id(0)``, in ``GROUP_M`` row sweeps). Rows:
    output pixels ``(n, od, p, q)`` of the whole batch (flat ``offs_m``, real where ``m_ok``) and the first input
    pixel ``(z0, h0, w0)`` of each one's window, decoded once; columns: produced channels ``offs_n`` of the group
    (real where ``n_ok``). ``ROW_VEC``: see :func:`row_length`.

    The depth arguments are those of :func:`depth_origin`: below 3D ``OD``, ``STRIDE_D`` and ``PAD_D1`` are the
    constant 1, ``od`` and ``z0`` fold to 0 and the rows decode as a 2D kernel's, with no added division."""
    Q = row_length(Q, ROW_VEC)
    M = BATCH * OD * P * Q
    pid_m, pid_n = swizzle(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(K_G, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = offs_m % Q
    p = (offs_m // Q) % P
    od = (offs_m // (Q * P)) % OD
    n = offs_m // (Q * P * OD)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    return (offs_m, offs_m < M, n, od, p, q, depth_origin(od, STRIDE_D, PAD_D1), p * STRIDE_H - PAD_H,
            q * STRIDE_W - PAD_W, offs_n, offs_n < K_G)


@triton.jit
def depth_origin(od, STRIDE_D, PAD_D1):
    """The first input depth ``od * stride_d - pad_d`` of output plane ``od``'s window. The host passes the front
    padding plus one (``PAD_D1``) so that no padding, as in every 1D/2D problem, is an argument of 1, which
    Triton's JIT compiles in as a constant (a 0 it would not): with ``od`` the constant 0 the origin folds to 0,
    and so do the depth bounds checks and addresses built on it."""
    return od * STRIDE_D + 1 - PAD_D1


@triton.jit
def tap_coords(tap, TD, R, S):
    """``(t, r, s)`` of flat tap indices ``tap = (t*R + r)*S + s``. With ``TD`` the constant 1 (every 1D/2D filter)
    ``t`` is ``... % 1``, the constant 0, and ``r = tap // S`` alone: no division more than a 2D decoding."""
    t = (tap // (R * S)) % TD
    return t, tap // S - t * R, tap % S


@triton.jit
def row_length(length, ROW_VEC: tl.constexpr):
    """The length of the pixel rows a kernel decodes (``offs % length``), known to the compiler to divide by
    ``ROW_VEC`` (the host's word: 16 in channels-first where it does, else 1). In channels-first the pixels of a
    row are the contiguous axis: knowing that its runs of 16 start on multiples of 16 is what lets the compiler
    move them in vectors, as it did when it specialised on the length itself."""
    return as_multiple(length, ROW_VEC)


@triton.jit
def weight_grad_tile(K_G, C_G, R, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """:func:`volume_weight_grad_tile` of a 2D filter (depth 1): ``(r, s, offs_m, m_ok, offs_n, n_ok)``."""
    t, r, s, offs_m, m_ok, offs_n, n_ok = volume_weight_grad_tile(K_G, C_G, 1, R, S, BLOCK_M, BLOCK_N)
    return r, s, offs_m, m_ok, offs_n, n_ok


@triton.jit
def volume_weight_grad_tile(K_G, C_G, TD, R, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The ``[output channels, input channels]`` tile of one tap that a weight-gradient program computes:
    ``program_id(0)`` enumerates (tap, input-channel tile, output-channel tile), output-channel tiles fastest,
    so that neighbouring programs gather the same input tile. Returns ``(t, r, s, offs_m, m_ok, offs_n, n_ok)``.

    The tap is reduced modulo ``TD*R*S`` (a no-op on the grid's programs) so that a 1x1 filter, whose ``R`` and
    ``S`` Triton specializes to the constant 1, has the constant tap 0: the compiler then sees the input
    tile's addresses unshifted and aligned, and vectorises its loads."""
    m_tiles = tl.cdiv(K_G, BLOCK_M)
    n_tiles = tl.cdiv(C_G, BLOCK_N)
    pid = tl.program_id(0)
    tap = (pid // (m_tiles * n_tiles)) % (TD * R * S)
    offs_m = (pid % m_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = ((pid // m_tiles) % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    t, r, s = tap_coords(tap, TD, R, S)
    return t, r, s, offs_m, offs_m < K_G, offs_n, offs_n < C_G


@triton.jit
def swizzle(pid, num_m, num_n, GROUP_M: tl.constexpr):
    """Tile coordinates of program ``pid``, visiting ``GROUP_M`` row tiles per column sweep (L2 reuse)."""
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    return pid_m, pid_n


@triton.jit
def divide(j, MAGIC, SHIFT):
    """``j // d`` for ``0 <= j < 2**31``, given ``(MAGIC, SHIFT)`` = :func:`conv_rdna.plans.common.divisor` ``(d)``.

    The weight gradient reduces over pixels, so its loops decode ``BLOCK_K`` flat pixel indices per step. A
    division by a run-time ``Q`` costs tens of instructions per element, and two of them per step kept the
    tensor cores idle half the time on the H100 (the rdna-9 benchmark page). With ``m = 2**32 + MAGIC =
    floor(2**(32 + SHIFT) / d) + 1``, ``j // d = (j * m) >> (32 + SHIFT)`` for every 32-bit ``j`` (Granlund and
    Montgomery, 1994), which is ``(umulhi(j, MAGIC) + j) >> SHIFT``: the sum cannot overflow for ``j < 2**31``.
    ``MAGIC`` arrives as a signed 32-bit integer and is reinterpreted.
    """
    ju = j.to(tl.uint32, bitcast=True)
    high = tl.umulhi(ju, tl.cast(MAGIC, tl.uint32, bitcast=True))
    return ((high + ju) >> SHIFT).to(tl.int32, bitcast=True)


@triton.jit
def as_multiple(value, unit):
    """``value``, a multiple of ``unit``, as ``(value // unit) * unit``: the same number, which the compiler now
    knows to divide by whatever it knows divides ``unit`` (a constexpr, or a specialised argument). How an
    unspecialised size (:data:`SIZES`) keeps the alignment the JIT used to read from its value."""
    return (value // unit) * unit


@triton.jit
def pixel_coords(j, P, Q, P_MAGIC, P_SHIFT, Q_MAGIC, Q_SHIFT):
    """``(n, p, q)`` of flat pixel indices ``j = (n*P + p)*Q + q`` (below 2**31), by :func:`divide`."""
    t = divide(j, Q_MAGIC, Q_SHIFT)
    n = divide(t, P_MAGIC, P_SHIFT)
    return n, t - n * P, j - t * Q
