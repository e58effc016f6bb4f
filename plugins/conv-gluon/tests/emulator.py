"""A CPU replay of ``kernels/fwd.py`` driven by a :class:`~conv_gluon.plans.Plan`, and of
``kernels/bwd_weight.py`` driven by a :class:`~conv_gluon.plans.WeightGradPlan`: the same scalars, tile (unit)
order, split ranges, masks, TMA bounds and weight matrix, in float64 with torch.

Gluon kernels do not run on the CPU (not even interpreted), so this is how the CPU suite checks the host side
(every argument :func:`conv_gluon.plans.make_plan` computes, the padded weight of :mod:`conv_gluon.weights`)
and the kernel's index arithmetic against conv-core's float64 reference. It mirrors the kernel statement by
statement; where the hardware does something (TMA zero fill beyond a tensor's bounds, ``cp.async`` zero fill
of masked copies), it does what the hardware does, not what the plan hopes for.
"""

from __future__ import annotations

import torch
from conv_core import activations
from conv_core.weight_cache import DerivedWeightCache
from conv_gluon import tiling, weights
from conv_gluon.kernels.codes import A_MODES, ACTIVATIONS
from conv_core.problem import element_size, torch_dtype
from conv_gluon.launch import dy_matrix, zero_phase_index
from conv_gluon.plans import DataGradPlan, Plan, WeightGradPlan

ACTIVATION_NAMES = {code: name for name, code in ACTIVATIONS.items()}


def erfc(u: torch.Tensor) -> torch.Tensor:
    """``kernels/common._erfc`` in float32, step by step."""
    z = u.abs()
    t = 1.0 / (1.0 + 0.5 * z)
    p = torch.full_like(z, 0.17087277)
    for coefficient in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
                        1.00002368, -1.26551223):
        p = p * t + coefficient
    r = t * torch.exp(p - z * z)
    return torch.where(u >= 0, r, 2.0 - r)


def activation(x: torch.Tensor, code: int) -> torch.Tensor:
    """``kernels/common.activation`` (float32); gelu through the kernel's erfc, the rest as defined."""
    name = ACTIVATION_NAMES[code]
    x = x.float()
    if name == "gelu":
        return 0.5 * x * erfc(-0.7071067811865476 * x)
    if name == "gelu_tanh":
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return 0.5 * x * (2.0 - 2.0 / (torch.exp(2.0 * u) + 1.0))
    if name == "silu":
        return x / (1.0 + torch.exp(-x))
    return activations.apply(name or None, x)


def _flat_nhwc(t: torch.Tensor) -> torch.Tensor:
    """The storage of a dense channels-last tensor, in memory order."""
    return t.movedim(1, -1).contiguous().reshape(-1)


def run(plan: Plan, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, out_shape, out_dtype) -> torch.Tensor:
    """What the kernel would write for ``plan`` on dense channels-last CPU operands (NaN: never written)."""
    y = torch.full((int(torch.tensor(out_shape).prod()),), float("nan"), dtype=torch.float64)
    launch(plan, _flat_nhwc(x).double(), weights.weight_matrix(w, plan.weight, DerivedWeightCache()).double(), bias,
           y)
    return _unflatten(y, out_shape, out_dtype)


def run_bwd_data(dplan: DataGradPlan, problem, dy: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """What ``launch.run_bwd_data`` would produce: the tap-less phases zeroed, every phase's launch replayed on
    its own weight matrix, writing from its first pixel in ``dx``."""
    shape = problem.result_shape
    y = torch.full((int(torch.tensor(shape).prod()),), float("nan"), dtype=torch.float64)
    channels_last = y.view(shape[0], *shape[2:], shape[1]).movedim(-1, 1)
    for first in dplan.zero_phases:
        channels_last[zero_phase_index(problem, first)] = 0.0
    dyf = _flat_nhwc(dy).double()
    for phase in dplan.phases:
        matrix = weights.pack_transposed(w, problem.groups, *phase.form)
        launch(phase.plan, dyf, matrix.double(), None, y)
    return _unflatten(y, shape, torch_dtype(problem.result_dtype))


def _unflatten(y: torch.Tensor, out_shape, out_dtype) -> torch.Tensor:
    n, k = out_shape[:2]
    return y.view(n, *out_shape[2:], k).movedim(-1, 1).to(out_dtype)


def launch(plan: Plan, xf: torch.Tensor, wmat: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor) -> None:
    """One launch of the kernel: ``xf`` the input's storage, ``wmat`` the weight matrix, writing into the flat
    ``y`` from its pixel ``Y_START`` (float64 throughout; the activation in float32 as the kernel does)."""
    s, c = dict(plan.scalars), dict(plan.constexprs)
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    box = c["A_MODE"] == A_MODES["tma_box"]
    w_rows, w_cols = plan.w_map.shape
    assert tuple(wmat.shape) == (w_rows, w_cols) and plan.w_map.strides == (w_cols, 1)
    rows = torch.arange(bm)
    cols = torch.arange(bn)
    kcols = torch.arange(bk)
    for tile in range(s["NUM_TILES"]):
        g, pid_m, pid_n = tiling.tile_coords(tile, s["TILES_M"], s["TILES_N"], c["GROUP_M"])
        n0 = pid_n * bn
        acc = torch.zeros(bm, bn, dtype=torch.float64)
        if c["HAS_BIAS"]:
            live = cols < s["K_G"] - n0
            acc[:, live] += bias.double()[g * s["K_G"] + n0 + cols[live]][None, :]
        if box:  # a box of one output plane, image * Z + z
            plane, rest = divmod(pid_m, s["TILES_IMG"])
            corner = divmod(rest, s["TILES_Q"])
            p = corner[0] * c["BOX_H"] + rows // c["BOX_W"]
            q = corner[1] * c["BOX_W"] + rows % c["BOX_W"]
            row_ok = (p < s["P"]) & (q < s["Q"])
            img, z = torch.full_like(rows, plane // s["Z"]), torch.full_like(rows, plane % s["Z"])
        else:
            m = pid_m * bm + rows
            row_ok = m < s["M"]
            img, z, p, q = _pixel_coords(m, s)
        if c["ROWS"] > 1:
            steps = _column_tiles(plan, xf, img[0], corner, g)
        elif box:
            steps = _box_tiles(plan, xf, plane, corner, g)
        else:
            steps = _gathered_tiles(plan, xf, img, z, p, q, row_ok, g)
        for a, col0 in steps:
            wr = g * s["K_G"] + n0 + cols
            wc = col0 + kcols
            bmask = (wr < w_rows)[:, None] & (wc < w_cols)[None, :]
            b = torch.where(bmask, wmat[wr.clamp(max=w_rows - 1)][:, wc.clamp(max=w_cols - 1)], 0.0)
            acc += a @ b.T
        out = activation(acc, c["ACTIVATION"]).double()
        row_off = (s["Y_START"] + img * s["sy_n"] + z * s["sy_d"] + p * s["sy_h"] + q * s["sy_w"]) * s["Y_CHANNELS"]
        cmask = cols < s["K_G"] - n0
        if c.get("TMA_STORE"):  # the TMA copy clips at the output's edges only: the tile must stay in its group
            assert plan.y_map.block == (1, c["BOX_H"], c["BOX_W"], bn) and s["Y_START"] == 0
            assert bool(cmask.all()) or g * s["K_G"] + n0 + bn >= plan.y_map.shape[-1]
        mask = row_ok[:, None] & cmask[None, :]
        offs = g * s["K_G"] + n0 + row_off[:, None] + cols[None, :]
        assert bool((offs[mask] < y.numel()).all()), "a store beyond the output"
        assert bool(torch.isnan(y[offs[mask]]).all()), "an element written twice"
        y[offs[mask]] = out[mask]


def _pixel_coords(m, s):
    """``kernels/pipeline.pixel_coords``: ``(image, z, p, q)`` of flattened output pixels ``m``."""
    q, p = m % s["Q"], (m // s["Q"]) % s["P"]
    plane = m // s["Q"] // s["P"]
    return plane // s["Z"], plane % s["Z"], p, q


def _depth(z, t, ok, s, c):
    """``kernels/pipeline.depth_offsets`` without the base: each row's input plane ``d`` for depth tap ``t``
    and ``ok`` narrowed to the planes inside the volume."""
    d = z * s["STRIDE_D"] - c["PAD_D"] + t * s["DIL_D"]
    return d, ok & (d >= 0) & (d < s["D"])


def _gathered_tiles(plan: Plan, xf, img, z, p, q, row_ok, g):
    """The gathering producer's k-steps: per (depth tap, tap, channel block) the masked ``[BLOCK_M, BLOCK_K]``
    tile of the tile's pixels shifted by the tap, and the step's weight column."""
    s, c = dict(plan.scalars), dict(plan.constexprs)
    bk = c["BLOCK_K"]
    kcols = torch.arange(bk)
    for flat in range(s["T"] * s["TAPS"]):
        dt, tap = divmod(flat, s["TAPS"])
        d, d_ok = _depth(z, dt, row_ok, s, c)
        r, t = divmod(tap, s["S"])
        h = p * s["STRIDE_H"] - s["PAD_H"] + r * s["DIL_H"]
        w_ = q * s["STRIDE_W"] - s["PAD_W"] + t * s["DIL_W"]
        ok = d_ok & (h >= 0) & (h < s["H"]) & (w_ >= 0) & (w_ < s["W"])
        base = torch.where(ok, img * s["sx_n"] + d * s["sx_d"] + g * s["C_G"] + h * s["sx_h"] + w_ * s["sx_w"], 0)
        for cb in range(s["NCB"]):
            ch = cb * bk + kcols
            if c["EVEN_C"]:
                cmask = torch.ones_like(ch, dtype=torch.bool)
            else:
                cmask = (ch // c["VEC"]) < (s["C_G"] // c["VEC"])
            mask = ok[:, None] & cmask[None, :]
            offs = base[:, None] + ch[None, :]
            yield torch.where(mask, xf[offs.clamp(0, xf.numel() - 1)], 0.0), (flat * s["NCB"] + cb) * bk


def _tma_box(plan: Plan, xf, tmap, img: int, h0: int, w0: int, channel: int) -> torch.Tensor:
    """The TMA box of ``tmap`` at ``(img, h0, w0, channel)`` as ``[box pixels, channels]``: zeros where a
    coordinate is out of the whole tensor's bounds (padding, negative coordinates, channels past the end)."""
    _, bh, bw, bk = tmap.block
    n_all, h_all, w_all, c_all = tmap.shape
    pix = torch.arange(bh * bw)
    h, w_ = h0 + pix // bw, w0 + pix % bw
    cabs = channel + torch.arange(bk)
    ok = (0 <= img < n_all) & (h >= 0) & (h < h_all) & (w_ >= 0) & (w_ < w_all)
    base = torch.where(ok, img * tmap.strides[0] + h * tmap.strides[1] + w_ * tmap.strides[2], 0)
    mask = ok[:, None] & (cabs < c_all)[None, :]
    return torch.where(mask, xf[(base[:, None] + cabs[None, :]).clamp(0, xf.numel() - 1)], 0.0)


def _input_plane(plane: int, t: int, s, c) -> int:
    """``kernels/pipeline.input_plane``: the input plane depth tap ``t`` of output plane ``plane`` reads, or -1
    (outside the tensor: zeros) where it lies outside the volume."""
    img, z = divmod(plane, s["Z"])
    d = z * s["STRIDE_D"] - c["PAD_D"] + t * s["DIL_D"]
    return img * s["D"] + d if 0 <= d < s["D"] else -1


def _box_tiles(plan: Plan, xf, plane: int, corner, g):
    """``fwd_box``'s k-steps: per (depth tap, tap, channel block) one TMA box at the tap's offset, in the depth
    tap's input plane."""
    s, c = dict(plan.scalars), dict(plan.constexprs)
    bk = c["BLOCK_K"]
    assert plan.x_map.block == (1, c["BOX_H"], c["BOX_W"], bk)
    for dt in range(s["T"]):
        x_plane = _input_plane(plane, dt, s, c)
        for tap in range(s["TAPS"]):
            r, t = divmod(tap, s["S"])
            h = corner[0] * c["BOX_H"] - s["PAD_H"] + r * s["DIL_H"]
            w_ = corner[1] * c["BOX_W"] - s["PAD_W"] + t * s["DIL_W"]
            for cb in range(s["NCB"]):
                a = _tma_box(plan, xf, plan.x_map, x_plane, h, w_, g * s["C_G"] + cb * bk)
                yield a, ((dt * s["TAPS"] + tap) * s["NCB"] + cb) * bk


def _column_tiles(plan: Plan, xf, img, corner, g):
    """``fwd_rows_box``'s k-steps: per (filter column, channel block) the tall box, the tile's box and the
    ``HALO_H`` rows below it (two TMA copies, one above the other), then each filter row ``r``'s view,
    ``r ROW_DIL`` box rows down, against that tap's weight column."""
    s, c = dict(plan.scalars), dict(plan.constexprs)
    bh, bw, bk, halo = c["BOX_H"], c["BOX_W"], c["BLOCK_K"], c["HALO_H"]
    assert plan.x_map.block == (1, bh, bw, bk) and plan.x_hi_map.block == (1, halo, bw, bk)
    assert (c["ROWS"] - 1) * c["ROW_DIL"] <= halo, "the tall box must hold the column's rows"
    h = corner[0] * bh - s["PAD_H"]
    for col in range(s["S"]):
        w_ = corner[1] * bw - s["PAD_W"] + col * s["DIL_W"]
        for cb in range(s["NCB"]):
            channel = g * s["C_G"] + cb * bk
            tall = torch.cat([_tma_box(plan, xf, plan.x_map, int(img), h, w_, channel),
                              _tma_box(plan, xf, plan.x_hi_map, int(img), h + bh, w_, channel)])
            for r in range(c["ROWS"]):
                start = r * c["ROW_DIL"] * bw
                yield tall[start:start + bh * bw], ((r * s["S"] + col) * s["NCB"] + cb) * bk


# ---- the weight gradient -----------------------------------------------------------------------------------


def run_bwd_weight(wplan: WeightGradPlan, problem, x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """What ``launch.run_bwd_weight`` would produce: every unit replayed in the kernel's order into its split's
    float32 slice (or, with one split, into ``dW`` itself), then the slices summed in split order. NaN marks an
    element never written; an element written twice fails."""
    target = run_units(wplan, _flat_nhwc(x).double(), dy_matrix(wplan, dy).double())
    out = sum_splits(wplan, target) if wplan.split else target
    k, c = problem.weight_shape[:2]
    return out.view(k, *problem.filter_size, c).movedim(-1, 1).to(torch_dtype(problem.result_dtype))


def run_units(wplan: WeightGradPlan, xf: torch.Tensor, dym: torch.Tensor) -> torch.Tensor:
    """One launch of ``kernels/bwd_weight.conv_bwd_weight``: ``xf`` the input's storage, ``dym`` the ``[J,
    dy_channels]`` matrix the TMA reads; returns what it writes (the split slices, or ``dW`` itself; NaN: never
    written)."""
    s = dict(wplan.scalars)
    size = wplan.splits * wplan.partial_numel if wplan.split else wplan.numel
    target = torch.full((size,), float("nan"), dtype=torch.float64)
    for unit in range(s["NUM_UNITS"]):
        # (the kernel splits the tap into its depth tap and the plane's: tap = t * TAPS + plane tap)
        split, g, tap, pid_m, pid_n = tiling.unit_coords(unit, s["TILES_M"], s["TILES_N"], s["T"] * s["TAPS"],
                                                         s["GROUPS"], dict(wplan.constexprs)["GROUP_M"])
        if wplan.rows > 1:
            _filter_column_unit(wplan, xf, dym, target, split, g, tap, pid_m, pid_n)
            continue
        acc = torch.zeros(wplan.config.block_m, wplan.config.block_n, dtype=torch.float64)
        for step in tiling.split_range(split, s["STEPS"], s["SPLIT_STEPS"]):
            a, b = _weight_grad_tiles(wplan, xf, dym, g, tap, pid_m, pid_n, step)
            acc += a.T @ b
        _store_partial(wplan, target, acc, split, g, tap, pid_m, pid_n)
    return target


def _filter_column_unit(wplan: WeightGradPlan, xf, dym, target, split, g, column, pid_m, pid_n) -> None:
    """A unit of ``bwd_weight_rows_box``: per step the dy box and the two x boxes stacked below each other
    (the second ``BOX_H`` rows further), then, as ``kernels/bwd_weight._rows_step`` issues them, every box row
    ``j`` of dy against the x row ``r * DIL_H + j`` for each filter row ``r``; the three tiles stored at taps
    ``(r, column)``."""
    s, c = dict(wplan.scalars), dict(wplan.constexprs)
    box_h, box_w, dil = c["BOX_H"], c["BOX_W"], c["ROW_DIL"]
    assert dil == s["DIL_H"] and box_h >= (wplan.rows - 1) * dil, "two boxes must hold the column's rows"
    accs = [torch.zeros(wplan.config.block_m, wplan.config.block_n, dtype=torch.float64) for _ in range(wplan.rows)]
    for step in tiling.split_range(split, s["STEPS"], s["SPLIT_STEPS"]):
        a, x_lo = _weight_grad_tiles(wplan, xf, dym, g, column, pid_m, pid_n, step)
        _, x_hi = _weight_grad_tiles(wplan, xf, dym, g, column, pid_m, pid_n, step, row_shift=box_h)
        stacked = torch.cat([x_lo, x_hi])
        for j in range(box_h):
            a_j = a[j * box_w:(j + 1) * box_w]
            for r, acc in enumerate(accs):
                t = r * dil + j
                acc += a_j.T @ stacked[t * box_w:(t + 1) * box_w]
    for r, acc in enumerate(accs):
        _store_partial(wplan, target, acc, split, g, r * s["S"] + column, pid_m, pid_n)


def sum_splits(wplan: WeightGradPlan, ws: torch.Tensor) -> torch.Tensor:
    """``kernels/bwd_weight.sum_splits``: each dW element from its padded place in every slice, in split order."""
    a = wplan.sum_scalars
    e = torch.arange(a["NUMEL"])
    row = e // a["C_G"]
    src = row * a["C_PAD"] + (e - row * a["C_G"])
    out = ws[src].clone()
    for split in range(1, a["SPLITS"]):
        out += ws[src + split * a["SPLIT_STRIDE"]]
    return out


def _tma_start_aligned(channel: int, dtype: str, what: str) -> None:
    """A TMA box must start on a 16-byte boundary of its innermost dimension: the H100 raises an illegal
    instruction otherwise (3 output channels per group did), which no CPU replay would notice by itself."""
    assert channel * element_size(dtype) % 16 == 0, f"{what} box starts at channel {channel}: not 16-byte aligned"


def _weight_grad_tiles(wplan: WeightGradPlan, xf, dym, g, tap, pid_m, pid_n, step, row_shift=0):
    """The ``dy`` tile ``[BLOCK_K, BLOCK_M]`` and the ``x`` tile ``[BLOCK_K, BLOCK_N]`` of one k-step, as the
    producer brings them (TMA bounds, or the gather's masks); ``row_shift``: the x box that many rows lower
    (a filter column's second box). ``tap`` is the unit's: a tap, or a filter column (its first row's)."""
    s, c = dict(wplan.scalars), dict(wplan.constexprs)
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    pix, m, n = torch.arange(bk), torch.arange(bm), torch.arange(bn)
    depth_tap, plane_tap = divmod(tap, s["TAPS"])
    row, t = divmod(plane_tap, s["S"])
    r = row * wplan.rows
    dh, dw = r * s["DIL_H"] - s["PAD_H"], t * s["DIL_W"] - s["PAD_W"]
    dy_col = g * s["DY_GROUP"] + pid_m * bm + m
    _tma_start_aligned(int(dy_col[0]), wplan.dtype, "dy")
    if c["X_MODE"] == A_MODES["tma_box"]:
        n_all, p_all, q_all, k_all = wplan.dy_map.shape  # (3D: the N x Z output planes)
        assert wplan.dy_map.block == (1, c["BOX_H"], c["BOX_W"], bm)
        plane, rest = divmod(step, s["TILES_IMG"])
        tp, tq = divmod(rest, s["TILES_Q"])
        p = tp * c["BOX_H"] + pix // c["BOX_W"]
        q = tq * c["BOX_W"] + pix % c["BOX_W"]
        rows_ok = (plane < n_all) & (p < p_all) & (q < q_all)
        j = (plane * p_all + p) * q_all + q  # the box's pixels in dy's [J, K] rows
        a = _bounded(dym, j, rows_ok, dy_col, dy_col < k_all)
        nx, hx, wx, cx = wplan.x_map.shape  # (3D: the N x D input planes)
        assert wplan.x_map.block == (1, c["BOX_H"], c["BOX_W"], bn)
        x_plane = _input_plane(plane, depth_tap, s, c)
        h, w = p + dh + row_shift, q + dw
        ok = (0 <= x_plane < nx) & (h >= 0) & (h < hx) & (w >= 0) & (w < wx)
        chan = g * s["C_G"] + pid_n * bn + n  # TMA reads every channel within the tensor
        _tma_start_aligned(int(chan[0]), wplan.dtype, "x")
        pixel = torch.where(ok, (x_plane * hx + h) * wx + w, 0)
        b = _bounded(xf.view(-1, cx), pixel, ok, chan, chan < cx)
        return a, b
    j = step * bk + pix
    rows_ok = j < s["J"]
    a = _bounded(dym, j, rows_ok & (j < wplan.dy_map.shape[0]), dy_col, dy_col < wplan.dy_map.shape[1])
    img, z, p, q = _pixel_coords(j, s)
    d, d_ok = _depth(z, depth_tap, rows_ok, s, c)
    h, w = p * s["STRIDE_H"] + dh, q * s["STRIDE_W"] + dw
    ok = d_ok & (h >= 0) & (h < s["H"]) & (w >= 0) & (w < s["W"])
    base = torch.where(ok, img * s["sx_n"] + d * s["sx_d"] + g * s["C_G"] + h * s["sx_h"] + w * s["sx_w"], 0)
    ch = pid_n * bn + n
    cmask = torch.ones_like(ch, dtype=torch.bool) if c["EVEN_C"] else (ch // c["VEC"]) < (s["C_G"] // c["VEC"])
    mask = ok[:, None] & cmask[None, :]
    offs = base[:, None] + ch[None, :]
    assert bool((offs[mask] < xf.numel()).all()), "a gathered element beyond the input"
    b = torch.where(mask, xf[offs.clamp(0, xf.numel() - 1)], 0.0)
    return a, b


def _bounded(matrix, rows, rows_ok, cols, cols_ok):
    """``matrix[rows][:, cols]`` with zeros where a row or column is out of bounds (TMA's zero fill)."""
    r = rows.clamp(0, matrix.shape[0] - 1)
    cl = cols.clamp(0, matrix.shape[1] - 1)
    return torch.where(rows_ok[:, None] & cols_ok[None, :], matrix[r][:, cl], 0.0)


def _store_partial(wplan: WeightGradPlan, target, acc, split, g, tap, pid_m, pid_n) -> None:
    """The consumer's epilogue: the tile's real output channels, and its input channels up to the slice's
    padded row (``dW`` itself: the real ones), into the split's slice. A TMA store (``TMA_STORE``) writes its
    box clipped at the result's edges only: the plan must keep it inside the group."""
    s, c = dict(wplan.scalars), dict(wplan.constexprs)
    m0, n0 = pid_m * c["BLOCK_M"], pid_n * c["BLOCK_N"]
    rows, cols = torch.arange(c["BLOCK_M"]), torch.arange(c["BLOCK_N"])
    if c["TMA_STORE"]:
        splits, k_all, taps, out_tap = wplan.out_map.shape
        assert wplan.out_map.block == (1, c["BLOCK_M"], 1, c["BLOCK_N"]) and out_tap == s["OUT_TAP"]
        assert split < splits and tap < taps
        mask = (g * s["K_G"] + m0 + rows < k_all)[:, None] & (n0 + cols < out_tap)[None, :]
    else:  # (the workspace: its padding too)
        mask = (rows < s["K_G"] - m0)[:, None] & (cols < s["OUT_TAP"] - n0)[None, :]
    offs = (split * s["SPLIT_STRIDE"] + (g * s["K_G"] + m0) * s["OUT_ROW"] + tap * s["OUT_TAP"] + n0
            + rows[:, None] * s["OUT_ROW"] + cols[None, :])
    assert bool((offs[mask] < target.numel()).all()), "a store beyond the output"
    assert bool(torch.isnan(target[offs[mask]]).all()), "an element written twice"
    target[offs[mask]] = acc[mask]
