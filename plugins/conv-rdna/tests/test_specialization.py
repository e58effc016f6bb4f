"""A new batch or image size compiles nothing new; the compile checks specialise exactly as Triton's JIT does.

Two problems that differ only in the batch size, or only in the image size, must give every launch of a
kernel the same specialization (:func:`conv_rdna.specialization.key`), configuration held equal (which one a
table picks for a shape is the tables' business, not the kernels'). In channels-last that holds for every
image size when the channel counts are multiples of 16; in channels-first the kernels also specialise on how
the image's pixel rows align (their vector width), so image sizes of one alignment class share kernels.
"""

from __future__ import annotations

import pytest
from conv_core.testing.aot import DIVISIBLE
from conv_core.problem import ConvProblem
from conv_rdna import candidates, configs, registry, specialization
from conv_rdna.kernels.common import SIZES, unspecialized
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction

TAB = configs.table("sm_90")

#: ResNet-50's kinds of layer, an RGB stem and output, a depthwise layer: every kernel of the plugin.
LAYERS = {
    "3x3": dict(in_channels=64, out_channels=64, filter_size=3, padding=1),
    "3x3/2": dict(in_channels=128, out_channels=128, filter_size=3, stride=2, padding=1),
    "1x1": dict(in_channels=256, out_channels=64, filter_size=1),
    "1x1/2": dict(in_channels=512, out_channels=1024, filter_size=1, stride=2),
    "stem": dict(in_channels=3, out_channels=64, filter_size=7, stride=2, padding=3),
    "rgb in": dict(in_channels=3, out_channels=64, filter_size=3, padding=1),
    "rgb out": dict(in_channels=64, out_channels=3, filter_size=3, padding=1),
    "depthwise": dict(in_channels=96, out_channels=96, filter_size=7, padding=3, groups=96),
}
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


def _problem(layer: str, direction: str, layout: str, batch: int, size: int) -> ConvProblem:
    fields = {"stride": 1, "padding": 0, "dilation": 1, **LAYERS[layer]}
    return ConvProblem("fwd", batch=batch, input_size=(size, size), dtype="bfloat16", layout=layout, arch="sm_90",
                       **fields).with_direction(direction)


def _keys(problem: ConvProblem, config_of: ConvProblem) -> dict[str, tuple]:
    """Each kernel's launch keys for ``problem``, with the configuration the table picks for ``config_of``."""
    keys = {}
    for kernel in candidates.kernels_for(config_of):
        config = configs.select(TAB, registry.REGISTRY.family_of(kernel), config_of)
        keys[kernel] = specialization.plan_keys(problem, registry.make_plan(problem, kernel, config, TAB))
    return keys


def _assert_same_kernels(base: ConvProblem, other: ConvProblem) -> None:
    """Every candidate of ``other`` runs kernels compiled for ``base`` (a batch run in more chunks launches
    them more often)."""
    mine, theirs = _keys(base, base), _keys(other, base)
    assert mine.keys() == theirs.keys()
    for kernel in mine:
        assert set(mine[kernel]) == set(theirs[kernel]), (kernel, base.key, other.key)


@pytest.mark.parametrize("layout", ["channels_last", "channels_first"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("batch", [16, 24, 64])
def test_a_new_batch_size_compiles_nothing(layer, direction, layout, batch):
    _assert_same_kernels(_problem(layer, direction, layout, 32, 56), _problem(layer, direction, layout, batch, 56))


@pytest.mark.parametrize("layout", ["channels_last", "channels_first"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("batch", [1, 7])
def test_a_small_batch_compiles_nothing_new_forward_or_backward_to_the_data(layer, direction, layout, batch):
    """(The weight gradient of a small batch may split its reduction fewer ways: another tile of the split sum,
    shared by every layer, or no split at all.)"""
    _assert_same_kernels(_problem(layer, direction, layout, 32, 56), _problem(layer, direction, layout, batch, 56))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layer", ["3x3", "3x3/2", "1x1", "1x1/2", "depthwise"])
@pytest.mark.parametrize("size", [64, 60, 224, 33])
def test_a_new_image_size_compiles_nothing_in_channels_last(layer, direction, size):
    """Channel counts that are multiples of 16: every image size."""
    base = _problem(layer, direction, "channels_last", 32, 56)
    _assert_same_kernels(base, _problem(layer, direction, "channels_last", 32, size))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layer", ["stem", "rgb in"])
def test_rgb_layers_share_kernels_across_the_usual_image_sizes(layer, direction):
    """Three input channels: 224 and 256 (rows of 672 and 768 elements, both multiples of 16) alike."""
    base = _problem(layer, direction, "channels_last", 32, 224)
    _assert_same_kernels(base, _problem(layer, direction, "channels_last", 32, 256))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layer", ["3x3", "1x1"])
def test_channels_first_image_sizes_of_one_alignment_class_share_kernels(layer, direction):
    """56 x 56 and 40 x 40: rows and pixel counts of the same alignment (not multiples of 16, multiples of 8)."""
    base = _problem(layer, direction, "channels_first", 32, 56)
    _assert_same_kernels(base, _problem(layer, direction, "channels_first", 32, 40))


def test_channels_first_kernels_do_specialise_on_the_alignment_class():
    """The checks above can fail: 14 x 14 maps (196 pixels) do not move in vectors as 16 x 16 ones do."""
    base = _problem("1x1", "fwd", "channels_first", 32, 16)
    mine, theirs = _keys(base, base), _keys(_problem("1x1", "fwd", "channels_first", 32, 14), base)
    assert mine["gemm1x1"] != theirs["gemm1x1"]


def _jit_specialization(kernel, values: dict) -> dict:
    """How Triton's JIT itself specialises the integer arguments ``values`` of ``kernel``: name -> what its
    ``specialize_impl`` answers (type, and ``"D"`` for divisible by 16 or the constant)."""
    jit = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn, **kernel.kwargs)
    return {p.name: native_specialize_impl(BaseBackend, values[p.name], p.is_const, not p.do_not_specialize, True)
            for p in jit.params if p.name in values}


@pytest.mark.parametrize("layout", ["channels_last", "channels_first"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layer", LAYERS)
def test_the_compile_checks_specialise_integers_as_the_jit_does(layer, direction, layout):
    problem = _problem(layer, direction, layout, 1, 7)  # ones and odd sizes: the JIT's special cases
    for kernel in candidates.kernels_for(problem):
        config = configs.select(TAB, registry.REGISTRY.family_of(kernel), problem)
        for launch in registry.make_plan(problem, kernel, config, TAB).launches:
            signature, constexprs, attrs = specialization.of_launch(launch, specialization.role_dtypes(problem))
            names = launch.kernel.arg_names
            for name, (kind, how) in _jit_specialization(launch.kernel, dict(launch.scalars)).items():
                if kind == "constexpr":
                    assert signature[name] == "constexpr" and constexprs[name] == how, (launch.name, name)
                else:
                    assert signature[name] == kind, (launch.name, name)
                    assert (attrs.get((names.index(name),)) == DIVISIBLE) == (how == "D"), (launch.name, name)


def test_every_size_argument_is_left_unspecialised():
    """Each kernel's do_not_specialize is exactly its parameters named in SIZES; some kernel takes each name."""
    kernels = {launch.kernel for problem in [_problem(layer, d, layout, 2, 9) for layer in LAYERS for d in DIRECTIONS
                                             for layout in ("channels_last", "channels_first")]
               for kernel in candidates.kernels_for(problem)
               for launch in registry.make_plan(problem, kernel,
                                                configs.select(TAB, registry.REGISTRY.family_of(kernel), problem),
                                                TAB).launches}
    for kernel in kernels:
        assert unspecialized(kernel) == SIZES & set(kernel.arg_names), kernel.__name__
    assert set().union(*(set(kernel.arg_names) for kernel in kernels)) >= SIZES


def test_unspecialised_ones_are_arguments_not_constants():
    """Batch 1 and a one-pixel-high image: the JIT would have compiled both in as constants."""
    launch = registry.make_plan(p := _problem("3x3", "fwd", "channels_last", 1, 1), "implicit_gemm",
                            configs.select(TAB, "implicit_gemm", p), TAB).launches[0]
    signature, constexprs, _ = specialization.of_launch(launch, specialization.role_dtypes(p))
    assert signature["BATCH"] == signature["H"] == "i32" and "BATCH" not in constexprs
    assert signature["R"] == "i32" and signature["STRIDE_H"] == "constexpr"  # per-layer facts stay specialised

