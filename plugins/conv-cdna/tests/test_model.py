"""The chip model and its fit, on the CPU without Triton's interpreter or a GPU (no kernel runs here)."""

import math

import pytest
from conv_core.problem import ConvProblem
from conv_rdna.api import REGISTRY, TileConfig, make_plan, rdna_table, select

from conv_cdna import model, validate
from conv_cdna.chips import chip, chip_names


def conv(batch=8, layout="channels_last", arch="sm_90", direction="fwd", **kw) -> ConvProblem:
    shape = dict(in_channels=64, out_channels=128, input_size=(56, 56), filter_size=3, stride=1, padding=1,
                 dilation=1) | kw
    return ConvProblem(direction=direction, batch=batch, dtype="bfloat16", layout=layout, arch=arch, **shape)


def plan(problem: ConvProblem, kernel="implicit_gemm"):
    tab = rdna_table("sm_90")
    with validate.compiled_plans():
        return make_plan(problem, kernel, select(tab, REGISTRY.family_of(kernel), problem), tab)


def test_every_kernel_has_fractions():
    factors = model.factors()
    assert set(factors) == set(REGISTRY.names)
    for kernel, f in factors.items():
        for key in validate.KEYS:
            assert 0 < f[key] <= 1, (kernel, key, f[key])


@pytest.mark.parametrize("name", chip_names())
def test_estimate_grows_with_the_problem(name):
    small, large = conv(batch=8, arch=name), conv(batch=32, arch=name)
    times = [model.estimate_us(p, plan(p), chip(name)) for p in (small, large)]
    assert times[0] < times[1]


def test_resident_tiles_respect_lds():
    """Two stages of 512 x 64 bf16 operands (128 KiB of LDS on AMD: one buffer per stage but the last) exceed
    gfx942's 64 KiB and fit gfx950's 160 KiB."""
    big = TileConfig(256, 256, 64, 8, 8, 3)
    assert chip("gfx942").tile_lds_bytes(big, "bfloat16") == 128 * 1024
    assert chip("gfx942").resident_tiles(big, "bfloat16") == 0
    assert chip("gfx950").resident_tiles(big, "bfloat16") >= 1


@pytest.mark.parametrize(("kernel", "layout", "size", "strided"), [
    ("implicit_gemm", "channels_last", 64, False),
    ("implicit_gemm", "channels_first", 64, True),  # gathers across channels whatever the rows
    ("bwd_weight_split", "channels_first", 64, False),  # rows of 64 pixels: vector loads along them
    ("bwd_weight_split", "channels_first", 14, True),
])
def test_channels_first_fraction_applies_to_strided_reads(kernel, layout, size, strided):
    direction = REGISTRY[kernel].directions[0]
    p = conv(layout=layout, direction=direction, input_size=(size, size))
    assert model.strided_reads(p, plan(p, kernel)) is strided


def synthetic_rows(factors: dict, launch_us: float) -> list[validate.Row]:
    """Rows of implicit_gemm in both layouts whose times are the model's with ``factors``: some compute-bound,
    some memory-bound."""
    rows = []
    for layout in ("channels_last", "channels_first"):
        p = conv(layout=layout)
        base = plan(p)
        for i in range(2 * validate.MIN_ROWS):
            compute, memory = 10.0 * 1.5 ** i, 400.0 / 1.4 ** i
            rate = factors["compute"] * (factors["channels_first"] if layout == "channels_first" else 1.0)
            us = max(compute / rate, memory / factors["memory"]) + launch_us
            rows.append(validate.Row("synthetic", p, base, us, compute, memory, 1, layout == "channels_first", 0.0))
    return rows


def test_fit_recovers_known_factors():
    known = {"compute": validate.GRID[20], "memory": validate.GRID[30], "channels_first": validate.GRID[12]}
    fitted = validate.fit(synthetic_rows(known, 4.0), launch_us=4.0)
    assert fitted["implicit_gemm"] == known
    assert fitted["conv3x3"] == known  # no rows: the medians of the one kernel fitted


def test_ranks_and_spearman():
    assert validate.ranks([3.0, 1.0, 3.0]) == [1.5, 0.0, 1.5]
    assert validate.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert validate.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


@pytest.fixture(scope="module")
def shipped_rows():
    if not validate.RUNS.exists():
        pytest.skip(f"{validate.RUNS} is not in this checkout")
    rows, _ = validate.build_rows(validate.read_runs(validate.RUNS))
    return rows


def test_grid_matches_estimate_us(shipped_rows):
    """The fit's tensor formula is :func:`conv_cdna.model.estimate_us`."""
    target, f = chip("sm_90"), model.factors()
    for kernel in ("implicit_gemm", "bwd_weight_split", "winograd_f4x3"):
        rows = [r for r in shipped_rows if r.kernel == kernel]
        grids = tuple((f[kernel][key],) for key in validate.KEYS)
        expected = sum(math.log(model.estimate_us(r.problem, r.plan, target) / r.us) ** 2 for r in rows)
        assert float(validate.grid_log_errors(rows, grids, target.launch_us)) == pytest.approx(expected)


def test_model_json_is_the_fit_of_the_shipped_runs(shipped_rows):
    assert validate.fit(shipped_rows) == model.factors()

