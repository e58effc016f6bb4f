"""Problems the conformance kit runs: hand-picked edge cases and seeded random ones.

Every problem is small (at most about 1e5 multiply-accumulates) so that slow
executors, such as Triton's CPU interpreter, can run hundreds of them. Each
geometry is written once as a *forward* problem and turned into the backward
problems with :meth:`ConvProblem.with_direction`, so the three directions are
always checked on the same shapes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence

from ..activations import ACTIVATIONS
from ..problem import DIRECTIONS, LAYOUTS, ConvProblem

#: Dtypes whose results are usually requested in float32 (mixed precision).
HALF_DTYPES = ("float16", "bfloat16")

#: Edge-case geometries of the forward convolution, by name. Fields not given
#: take the values of :data:`_BASE`. Each name says what the case is for.
_BASE = dict(batch=2, in_channels=4, out_channels=4, input_size=(8, 8), filter_size=(3, 3), stride=1, padding=1,
             dilation=1, groups=1)

EDGE_GEOMETRIES: dict[str, dict] = {
    "3x3": {},
    "1x1": dict(in_channels=8, out_channels=8, input_size=(6, 6), filter_size=(1, 1), padding=0),
    "3x3-stride2": dict(input_size=(9, 9), stride=2),
    "3x3-stride2-even": dict(input_size=(8, 6), stride=2),
    "dilation2": dict(dilation=2, padding=2),
    "stride2-dilation2": dict(input_size=(11, 9), stride=2, dilation=2, padding=1),
    "asymmetric-padding": dict(input_size=(7, 6), padding=((1, 0), (0, 2))),
    "groups2": dict(out_channels=6, groups=2),
    "depthwise": dict(in_channels=6, out_channels=6, groups=6),
    "depthwise-multiplier2": dict(in_channels=4, out_channels=8, groups=4, stride=2, input_size=(9, 8)),
    "batch1": dict(batch=1, in_channels=8, out_channels=8),
    "in-channels1": dict(in_channels=1, out_channels=4),
    "in-channels3": dict(in_channels=3, out_channels=8, stride=2, input_size=(11, 11)),
    "out-channels3": dict(out_channels=3),
    "odd-7x5": dict(input_size=(7, 5)),
    "filter-fills-input": dict(input_size=(5, 5), filter_size=(5, 5), padding=0),
    "filter-fills-padded-input": dict(input_size=(3, 4), filter_size=(5, 6), padding=1),
    "filter-1x3": dict(filter_size=(1, 3), padding=(0, 1)),
    "filter-3x1": dict(filter_size=(3, 1), padding=(1, 0)),
    "filter-7x1": dict(input_size=(9, 6), filter_size=(7, 1), padding=(3, 0)),
    "filter-2x2-stride3": dict(input_size=(8, 7), filter_size=(2, 2), stride=3, padding=0),
    "filter1-stride2": dict(filter_size=(1, 1), stride=2, padding=0, input_size=(7, 8)),
    "large-padding": dict(input_size=(4, 5), padding=4),
    "conv1d": dict(input_size=(17,), filter_size=(3,), stride=2, padding=1),
    "conv1d-dilated-asymmetric": dict(input_size=(15,), filter_size=(5,), dilation=2, padding=((3, 1),),
                                      out_channels=6, groups=2),
    "conv3d": dict(in_channels=2, input_size=(5, 5, 4), filter_size=(3, 3, 3)),
    "conv3d-strided-groups": dict(input_size=(6, 5, 7), filter_size=(3, 1, 3), stride=(2, 1, 2),
                                  padding=((1, 0), (0, 0), (1, 1)), groups=2),
}

#: (geometry, bias, activation) of the extra forward cases that check the fused epilogue.
#: Activations rotate over different geometries so that each meets different shapes.
EPILOGUES: tuple[tuple[str, bool, str | None], ...] = (
    ("3x3", True, None),
    ("3x3-stride2", True, "relu"),
    ("groups2", True, "relu6"),
    ("asymmetric-padding", True, "gelu"),
    ("conv1d", True, "gelu_tanh"),
    ("depthwise", True, "silu"),
    ("odd-7x5", False, "silu"),
    ("conv3d", True, "relu"),
)

#: (geometry, bias, activation) of the data-gradient cases with a transposed convolution's epilogue, offered only to
#: candidates tagged ``transposed_epilogue``.
TRANSPOSED_EPILOGUES: tuple[tuple[str, bool, str | None], ...] = (
    ("3x3-stride2", True, "relu"),
    ("filter-2x2-stride3", True, None),
    ("conv1d", False, "silu"),
)

#: Geometries of the mixed-precision forward cases (half inputs, float32 result).
MIXED_PRECISION: tuple[tuple[str, bool, str | None], ...] = (
    ("3x3", False, None),
    ("groups2", True, "relu"),
)


def _forward_problem(geometry: dict, dtype: str, layout: str, arch: str, **epilogue) -> ConvProblem:
    return ConvProblem(direction="fwd", dtype=dtype, layout=layout, arch=arch, **{**_BASE, **geometry, **epilogue})


def _dedupe(problems: Iterable[ConvProblem]) -> list[ConvProblem]:
    """Problems in order, each once."""
    return list(dict.fromkeys(problems))


def edge_problems(arch: str = "cpu", directions: Sequence[str] = DIRECTIONS,
                  dtypes: Sequence[str] = ("float32",), layouts: Sequence[str] = LAYOUTS) -> list[ConvProblem]:
    """The fixed edge cases, for every direction x dtype x layout asked for.

    Every geometry of :data:`EDGE_GEOMETRIES` in every direction; in ``bwd_data``
    also the cases of :data:`TRANSPOSED_EPILOGUES`; in ``fwd`` also the
    bias/activation cases of :data:`EPILOGUES` and, for float16 and bfloat16
    inputs, the float32-result cases of :data:`MIXED_PRECISION`.
    """
    problems = []
    for dtype, layout in itertools.product(dtypes, layouts):
        forward = [_forward_problem(g, dtype, layout, arch) for g in EDGE_GEOMETRIES.values()]
        for direction in directions:
            problems.extend(p.with_direction(direction) for p in forward)
        if "bwd_data" in directions:
            for name, bias, activation in TRANSPOSED_EPILOGUES:
                bare = _forward_problem(EDGE_GEOMETRIES[name], dtype, layout, arch).with_direction("bwd_data")
                problems.append(bare.replace(bias=bias, activation=activation))
        if "fwd" not in directions:
            continue
        for name, bias, activation in EPILOGUES:
            problems.append(_forward_problem(EDGE_GEOMETRIES[name], dtype, layout, arch, bias=bias,
                                             activation=activation))
        if dtype in HALF_DTYPES:
            for name, bias, activation in MIXED_PRECISION:
                problems.append(_forward_problem(EDGE_GEOMETRIES[name], dtype, layout, arch, bias=bias,
                                                 activation=activation, out_dtype="float32"))
    return _dedupe(problems)


# ---- random problems -----------------------------------------------------------------------------

#: Largest spatial extent drawn per number of spatial dimensions (keeps problems small).
_MAX_EXTENT = {1: 40, 2: 14, 3: 7}


def _random_geometry(rng: random.Random, ndim: int) -> dict:
    """One random forward geometry; it may be invalid (the caller redraws)."""
    groups = rng.choice((1, 1, 1, 2, 3, 4))
    in_per_group, out_per_group = rng.randint(1, 8), rng.randint(1, 8)
    if rng.random() < 0.15:  # depthwise, sometimes with a channel multiplier
        groups, in_per_group, out_per_group = rng.randint(2, 8), 1, rng.choice((1, 1, 2))
    filter_size = tuple(rng.randint(1, 5 if ndim < 3 else 3) for _ in range(ndim))
    dilation = tuple(rng.choice((1, 1, 2)) for _ in range(ndim))
    padding = []
    for k, d in zip(filter_size, dilation):
        reach = d * (k - 1)
        lo = rng.randint(0, reach)
        hi = lo if rng.random() < 0.6 else rng.randint(0, reach)
        padding.append((lo, hi))
    return dict(
        batch=rng.randint(1, 3), in_channels=groups * in_per_group, out_channels=groups * out_per_group,
        groups=groups, input_size=tuple(rng.randint(1, _MAX_EXTENT[ndim]) for _ in range(ndim)),
        filter_size=filter_size, stride=tuple(rng.choice((1, 1, 2, 3)) for _ in range(ndim)),
        padding=tuple(padding), dilation=dilation,
    )


def _random_epilogue(rng: random.Random, dtype: str) -> dict:
    """Bias, activation and result dtype of a random forward problem."""
    epilogue = dict(bias=rng.random() < 0.5, activation=rng.choice((None, None, *sorted(ACTIVATIONS))))
    if dtype in HALF_DTYPES and rng.random() < 0.25:
        epilogue["out_dtype"] = "float32"
    return epilogue


def random_problems(seed: int = 0, count: int = 20, arch: str = "cpu", directions: Sequence[str] = DIRECTIONS,
                    dtypes: Sequence[str] = ("float32",), layouts: Sequence[str] = LAYOUTS,
                    max_macs: int = 100_000) -> list[ConvProblem]:
    """``count`` valid random problems of at most ``max_macs`` MACs, the same for the same arguments.

    Direction, dtype and layout go round-robin over their product (in a
    seeded order), so that ``count`` at least the product's size covers each
    combination once. The geometry is drawn: mostly 2D, sometimes 1D or 3D;
    groups dividing both channel counts (depthwise included); filters 1 to 5;
    stride 1 to 3; dilation 1 or 2; padding up to the dilated filter's reach,
    often asymmetric. Forward problems get a random bias, activation and (for
    half inputs) float32 result. Invalid or too large draws are redrawn.
    """
    rng = random.Random(seed)
    combos = list(itertools.product(directions, dtypes, layouts))
    rng.shuffle(combos)
    problems: list[ConvProblem] = []
    for index in range(count):
        direction, dtype, layout = combos[index % len(combos)]
        problems.append(_draw(rng, direction, dtype, layout, arch, max_macs))
    return problems


def _draw(rng: random.Random, direction: str, dtype: str, layout: str, arch: str, max_macs: int) -> ConvProblem:
    for _ in range(10_000):
        ndim = rng.choices((1, 2, 3), weights=(2, 6, 2))[0]
        fields = _random_geometry(rng, ndim)
        if direction == "fwd":
            fields.update(_random_epilogue(rng, dtype))
        try:
            problem = ConvProblem(direction="fwd", dtype=dtype, layout=layout, arch=arch, **fields)
        except ValueError:
            continue
        if problem.macs <= max_macs:
            return problem.with_direction(direction)
    raise ValueError(f"no valid problem of at most max_macs={max_macs} MACs found; raise max_macs")
