"""conv-rdna's kernels: one :class:`~conv_core.kit.registry.KernelEntry` each, in the order candidates are
offered. The candidates (:mod:`conv_rdna.candidates`), the compile jobs (:mod:`conv_rdna.aot`), the sweep space
(:mod:`conv_rdna.sweep`) and the README's kernel table (:meth:`~conv_core.kit.registry.Registry.markdown_table`,
checked by tests/test_candidates.py) are all read from :data:`REGISTRY`.

An entry's ``applies`` gives the reason the kernel does not run a problem its directions and layouts allow.
One rule crosses families: a depthwise problem with several groups takes the depthwise kernel only (the
general families would run one channel per group through 16-wide matrix tiles, 1/16 of the reduction and
about 1/64 of the columns real, and gather one element per pixel row: tens of times slower for the same
traffic); with a single input channel (``groups == 1``) the core ranks both.
"""

from __future__ import annotations

import dataclasses
import functools

from conv_core.geometry import Geometry
from conv_core.kit.declines import ndim_issue
from conv_core.kit.registry import KernelEntry, Registry, always
from conv_core.problem import ConvProblem

from . import estimates
from .configs import ArchTable
from .plans import channels_first, col2im, depthwise, few_channels, gradients, grouped, implicit_gemm, winograd
from .plans import shuffle, winograd_bwd_weight
from .plans.common import Plan, bwd_data_phases


#: Spatial ranks a kernel takes: the families with a depth axis (``conv_core.geometry.Geometry``'s) take
#: ``VOLUMES``; the others, ``PLANES``. The backend's own ranks (:func:`conv_rdna.candidates.decline_reason`) are
#: those some kernel takes.
VOLUMES, PLANES = (1, 2, 3), (1, 2)
RANKS = VOLUMES
#: Where a 3D problem goes instead of a 1D/2D-only kernel.
VOLUME_KERNELS = ("the implicit GEMM, `gemm1x1`, the phased data gradient, the split weight gradient (channels-first "
                  "tensors too, through their strides) and the depthwise kernels")


def ranked(applies, ranks: tuple[int, ...]):
    """``applies`` of a kernel taking the spatial ranks ``ranks``: a problem of another rank first."""

    def issue(problem: ConvProblem) -> str | None:
        return ndim_issue(problem, ranks, VOLUME_KERNELS) or applies(problem)
    return issue


def depthwise_issue(problem: ConvProblem) -> str | None:
    """Why the depthwise kernels do not apply to ``problem``, or None (they take any multiplier
    ``out_channels / groups``, filter, stride, dilation and padding, in 1D, 2D and 3D)."""
    if problem.groups != problem.in_channels:
        return (f"not depthwise: groups={problem.groups} != in_channels={problem.in_channels} (the depthwise "
                "kernels need exactly one input channel per group)")
    return None


def general_issue(problem: ConvProblem) -> str | None:
    """Why a general family leaves ``problem`` to the depthwise kernel: depthwise with several groups."""
    if problem.groups > 1 and depthwise_issue(problem) is None:
        return "depthwise with several groups: only the depthwise kernel is offered"
    return None


def pointwise_issue(problem: ConvProblem) -> str | None:
    pointwise = (all(k == 1 for k in problem.filter_size) and all(s == 1 for s in problem.stride)
                 and not any(lo or hi for lo, hi in problem.padding))
    return general_issue(problem) or (None if pointwise else "not 1x1 / stride 1 / no padding")


def three_by_three_issue(problem: ConvProblem) -> str | None:
    return general_issue(problem) or (None if implicit_gemm.three_by_three(problem)
                                      else "not a 2D 3x3 forward or stride-1 data gradient")


def phased_issue(problem: ConvProblem) -> str | None:
    """The channels-first data gradient runs its stride phases as forward convolutions of ``dy``, those
    without taps left to a fill of zeros (:func:`conv_rdna.plans.common.bwd_data_phases`)."""
    if problem.direction == "bwd_data" and not bwd_data_phases(Geometry.of(problem), leave_zeros=True):
        return "a dilated strided data gradient: its stride phases are not forward convolutions of dy"
    return general_issue(problem)


def shuffle_issue(problem: ConvProblem) -> str | None:
    if not shuffle.filter_is_stride(problem):
        return "the filter is not the stride on every axis (or is dilated, or 1 everywhere)"
    if problem.transposed_epilogue and shuffle.uncovered(Geometry.of(problem)):
        return "elements past the last window would need the epilogue of zero (output_padding)"
    return general_issue(problem)


def few_channels_issue(kernel: str, few: str):
    """``applies`` of a few-channel kernel for layers of ``few`` ("input" or "output") channels: offered where
    :func:`~conv_rdna.plans.few_channels.few_channels_kernels` names it."""

    def issue(problem: ConvProblem) -> str | None:
        if kernel in few_channels.few_channels_kernels(problem):
            return general_issue(problem)
        return (f"needs at most {few_channels.FEW_CHANNELS} {few} channels per group (and a filter and stride "
                "it serves)")
    return issue


def winograd_issue(problem: ConvProblem) -> str | None:
    if not winograd.applies(problem):
        return "not a Winograd layer (3x3, stride 1, dilation 1, one group, >= 64 channels, padding <= 1)"
    return general_issue(problem)


def winograd_bwd_weight_issue(problem: ConvProblem) -> str | None:
    if not winograd_bwd_weight.applies(problem):
        return "not a Winograd layer (3x3, stride 1, dilation 1, one group, >= 64 channels, >= 16 tiles)"
    return general_issue(problem)


def grouped_issue(problem: ConvProblem) -> str | None:
    """Why the grouped kernels do not run ``problem``: they take several groups of
    :data:`~conv_rdna.plans.grouped.MIN_CHANNELS` to :data:`~conv_rdna.plans.grouped.MAX_CHANNELS` channels in and
    out (so never a depthwise problem), and the data gradient by stride phase (:func:`phased_issue`); 1D and 2D only
    (the entries' ``ranks``)."""
    low, high = grouped.MIN_CHANNELS, grouped.MAX_CHANNELS
    cin, cout = problem.in_channels // problem.groups, problem.out_channels // problem.groups
    if problem.groups == 1 or not (low <= cin <= high and low <= cout <= high):
        return f"needs several groups of {low} to {high} input and output channels each"
    return phased_issue(problem)


def _entry(name: str, family: str, directions: tuple[str, ...], plan, estimate=None, *, summary: str,
           ranks: tuple[int, ...] = PLANES, applies=always, **fields) -> KernelEntry:
    """An entry whose estimate defaults to a GEMM-tiled kernel's of its family, offered for problems of the spatial
    ``ranks`` it takes (1D/2D unless it says otherwise)."""
    estimate = estimate or functools.partial(estimates.tiled, family=family)
    return KernelEntry(name, family, directions, summary, plan, estimate, applies=ranked(applies, ranks), **fields)


def _few(name: str, few: str, directions: tuple[str, ...], plan, estimate=None, *, summary: str) -> KernelEntry:
    """A kernel for layers of ``few`` ("input" or "output") channels: its own family, offered where
    :func:`few_channels_issue` allows."""
    return _entry(name, name, directions, plan, estimate, applies=few_channels_issue(name, few), summary=summary)


def _cf_estimate(family: str):
    """A channels-first kernel's estimate: tiled for those tensors (no ``channels_first_factor``)."""
    return functools.partial(estimates.tiled, family=family, channels_first_kernel=True)


FWD, BWD_DATA, BWD_WEIGHT = ("fwd",), ("bwd_data",), ("bwd_weight",)
CF = ("channels_first",)

#: The general families: any 1D/2D geometry.
GENERAL = (
    _entry("implicit_gemm", "implicit_gemm", FWD, implicit_gemm.implicit_gemm, applies=general_issue,
           ranks=VOLUMES, summary=(
        "`M` = batch x output pixels, `N` = output channels of the group, `K` = taps x input channels of the "
        "group. The reduction is one flat loop over taps (outer) x `BLOCK_K` channels (inner), so pixel "
        "coordinates are computed once per tap and channel block and the loop software-pipelines even with "
        "few channels. Fused epilogue in float32: bias, activation (`relu`, `relu6`, exact `gelu` through "
        "`erf`, `gelu_tanh`, `silu`, as `conv_core.activations` defines them), one rounding to the output "
        "dtype (which may differ from the input's).")),
    _entry("bwd_data_phased", "bwd_data", BWD_DATA, gradients.bwd_data_phased, applies=general_issue,
           ranks=VOLUMES, summary=(
        "the data gradient decomposed by **stride phase** (below): no wasted taps for stride > 1.")),
    _entry(shuffle.KERNEL, "bwd_data", BWD_DATA, shuffle.shuffle_bwd_data, applies=shuffle_issue, ranks=VOLUMES,
           transposed_epilogue=True, summary=(
        "filter = stride on every axis, undilated (the transposed convolution of a UNet up-convolution): one GEMM "
        "over `dy`'s pixels with `N` = taps x input channels, each tile stored through a **pixel shuffle** "
        "(every `dx` element is one tap's), reading `dy` once where the phased kernel reads it once per tap; a "
        "transposed convolution's bias and activation in its store.")),
    _entry("bwd_weight_split", "bwd_weight", BWD_WEIGHT, gradients.bwd_weight, applies=general_issue,
           ranks=VOLUMES, summary=(
        "`M` = output channels, `N` = input channels (one tap per program), `K` = batch x output pixels, "
        "split into ranges reduced **deterministically** through a float32 workspace (below).")),
    _entry("bwd_weight_atomic", "bwd_weight", BWD_WEIGHT, gradients.bwd_weight, applies=general_issue,
           ranks=VOLUMES, summary=(
        "the same split, accumulated with `tl.atomic_add` into one float32 buffer.")),
    _entry("gemm1x1", "gemm1x1", FWD + BWD_DATA, implicit_gemm.gemm1x1, applies=pointwise_issue,
           ranks=VOLUMES, summary=(
        "1x1 filter, stride 1, no padding: a plain GEMM over pixels (`H*W` merged), with the weight strides "
        "of the reduced and the produced channel swapped between the forward and the data gradient. Same "
        "epilogue.")),
    _entry("conv3x3", "conv3x3", FWD + BWD_DATA, implicit_gemm.conv3x3, applies=three_by_three_issue, summary=(
        "3x3 filters (the forward at any stride, dilation, padding and groups; the data gradient at stride "
        "1): `implicit_gemm`'s GEMM with the taps known to the compiler, walked channels outer and taps inner"
        " (below). Same epilogue.")),
)

#: Channels-first tensors: pixel tiles of one image loading along W.
CHANNELS_FIRST = (
    _entry("implicit_gemm_cf", "implicit_gemm_cf", FWD, channels_first.implicit_gemm_cf,
           _cf_estimate("implicit_gemm_cf"),
        applies=general_issue, layouts=CF, summary=(
        "channels-first problems only: the implicit GEMM with pixel tiles of **one image**, loading along W "
        "(below). Same epilogue.")),
    _entry("bwd_data_cf", "implicit_gemm_cf", BWD_DATA, channels_first.bwd_data_cf, _cf_estimate("implicit_gemm_cf"),
        applies=phased_issue, layouts=CF, summary=(
        "channels-first, any stride of undilated layers: the data gradient as `implicit_gemm_cf` over `dy`, "
        "one launch per stride phase of `dx` that has taps, with the weight transposed and flipped (below); "
        "`dx` zeroed first where a phase has none (a 1x1 filter at stride 2).")),
    _entry("bwd_weight_cf", "bwd_weight_cf", BWD_WEIGHT, channels_first.bwd_weight_cf, _cf_estimate("bwd_weight_cf"),
        applies=general_issue, layouts=CF, summary=(
        "channels-first: the split weight gradient with pixel blocks of one image (deterministic, as "
        "`bwd_weight_split`).")),
)

#: At most 8 input or output channels per group (the layer's, whatever the direction).
FEW_CHANNELS = (
    _few("few_channels_in", "input", FWD, few_channels.few_cin, summary=(
        "at most 8 input channels per group (an RGB stem): an implicit GEMM whose reduction runs over the "
        "flattened (tap, channel) pairs, in steps of a filter row (NHWC) or a channel (NCHW) whose lanes' "
        "offsets are computed once (below). Same epilogue.")),
    _few("few_channels_out", "output", FWD, few_channels.few_cout, estimates.few_cout, summary=(
        "at most 8 output channels per group and at most 32 taps (an image output layer): every tap of every "
        "output channel is a column of one GEMM over the input channels, read once per tile; a shift-and-add "
        "gives the output (below). Same epilogue.")),
    _few("few_channels_in_bwd_weight", "input", BWD_WEIGHT, few_channels.few_channels_bwd_weight, summary=(
        "at most 8 input channels per group: `M` = output channels, `N` = the flattened (tap, channel) pairs "
        "(147 for the stem, in `few_channels_in`'s order), `K` = batch x output pixels, split and reduced "
        "**deterministically** through a float32 workspace (below).")),
    _few("few_channels_out_bwd_weight", "output", BWD_WEIGHT, few_channels.few_channels_bwd_weight, summary=(
        "at most 8 output channels per group and at most 32 taps: `M` = the (output channel, tap) rows (27 "
        "for 3 x 3x3), `N` = input channels, `K` = batch x **input** pixels (the large operand read once, "
        "`dy` gathered), split and reduced deterministically (below).")),
    _few("few_channels_in_bwd_data", "input", BWD_DATA, few_channels.few_cout, estimates.few_cout, summary=(
        "stride 1, at most 8 input channels per group: `few_channels_out`'s kernel on `dy` with the weight "
        "transposed and flipped by strides (below).")),
    _few("col2im_bwd_data", "input", BWD_DATA, col2im.col2im_bwd_data, summary=(
        "at most 8 input channels per group, any stride, dilation and padding: `Z = dy @ w` over every "
        "(channel, tap) column (`gemm1x1`'s kernel into a float32 workspace), then a gather of `dx` from `Z` "
        "by stride phase, on chunks of images of at most 64 MB of `Z` (below).")),
    _few("few_channels_out_bwd_data", "output", BWD_DATA, few_channels.few_cin, summary=(
        "at most 8 output channels per group, any stride (not dilated and strided): one launch per stride "
        "phase of `few_channels_in`'s kernel on `dy` with the weight transposed and flipped by strides "
        "(below).")),
)

#: Winograd F(4x4, 3x3): kernels in sequence around 36 GEMMs.
WINOGRAD = (
    _entry(winograd.KERNEL, winograd.FAMILY, winograd.DIRECTIONS, winograd.make_plan, winograd.estimate_us,
        applies=winograd_issue, error_factor=winograd.error_factor, run=winograd.run, summary=(
        "3x3, stride 1, dilation 1, groups 1, at least 64 input and output channels, padding of at most 1 a "
        "side (the data gradient: 1 or 2): Winograd F(4x4, 3x3), an input transform, 36 GEMMs over channels "
        "with a quarter of the direct matrix work, an output transform with the same epilogue; the data "
        "gradient as the forward convolution of `dy` with the weight transposed and flipped; the transformed "
        "weight is cached (below).")),
    _entry(winograd_bwd_weight.KERNEL, winograd_bwd_weight.FAMILY, BWD_WEIGHT, winograd_bwd_weight.make_plan,
           winograd_bwd_weight.estimate_us,
        applies=winograd_bwd_weight_issue, error_factor=winograd_bwd_weight.error_factor, summary=(
        "the same layers with at least 16 tiles of `dy`: `dw = G^T [(A dY A^T) (.) (B^T D B)] G` over 4x4 "
        "tiles of `dy`, the forward's input transform, a transform of `dy`, 36 GEMMs reduced over tiles in "
        "split ranges (float32 partials), a final transform summing the splits in order (deterministic; "
        "below).")),
)

#: Depthwise problems (``groups == in_channels``, any multiplier): FMA stencils.
DEPTHWISE = (
    _entry("depthwise_fwd", "depthwise_fwd", FWD, depthwise.depthwise_fwd, estimates.depthwise,
        applies=depthwise_issue, ranks=VOLUMES, summary=(
        "`groups == in_channels` (any multiplier): a stencil, no matrix units; `[pixels, channels]` tiles "
        "accumulate the taps with FMAs in float32 (below). Same epilogue.")),
    _entry("depthwise_bwd_data", "depthwise_bwd_data", BWD_DATA, depthwise.depthwise_bwd_data, estimates.depthwise,
        applies=depthwise_issue, ranks=VOLUMES, summary=(
        "the depthwise stencil with the flipped filter, by stride phase; the multiplier's output channels "
        "summed in the kernel.")),
    _entry("depthwise_bwd_weight", "depthwise_bwd_weight", BWD_WEIGHT, depthwise.depthwise_bwd_weight,
           estimates.depthwise,
        applies=depthwise_issue, ranks=VOLUMES, summary=(
        "per (tap, channel) sums over the batch's pixels, split into ranges reduced **deterministically** "
        "through a float32 workspace.")),
)

#: Several groups of 2 to 64 channels: tiles of whole groups, the weight block-diagonal.
GROUPED = (
    _entry("grouped", "grouped", FWD + BWD_DATA, grouped.grouped, estimates.grouped, applies=grouped_issue, summary=(
        "groups of 2 to 64 channels (ResNeXt, RegNet): a tile covers as many whole groups as fill its "
        "`BLOCK_N` output channels (4 groups of 4 in 16 columns), its reduction runs over the taps x the tile's "
        "input channels with the weight loaded **block-diagonal**, zero across groups (below). The data "
        "gradient: the same kernel on `dy`, one launch per stride phase, the weight transposed and flipped. "
        "Same epilogue.")),
    _entry("grouped_bwd_weight", "grouped_bwd_weight", BWD_WEIGHT, grouped.grouped_bwd_weight, estimates.grouped,
        applies=grouped_issue, summary=(
        "the same groups: `[output x input channels]` of a tile's groups per tap, reduced over the batch's "
        "pixels, only the diagonal blocks stored; split and reduced **deterministically** through a float32 "
        "workspace (below).")),
)

REGISTRY = Registry((*GENERAL, *CHANNELS_FIRST, *FEW_CHANNELS, *WINOGRAD, *DEPTHWISE, *GROUPED))

#: Every configuration family, in registry order.
FAMILIES = REGISTRY.families()
#: Families that serve particular layers (few channels, depthwise, Winograd, grouped), as opposed to any layer.
SPECIFIC_FAMILIES = tuple(dict.fromkeys(e.family for e in (*FEW_CHANNELS, *DEPTHWISE, *WINOGRAD, *GROUPED)))


def names(entries) -> tuple[str, ...]:
    """The kernel names of a group of entries (:data:`CHANNELS_FIRST`, :data:`DEPTHWISE`, ...)."""
    return tuple(e.name for e in entries)


def make_plan(problem: ConvProblem, kernel: str, config, tab: ArchTable) -> Plan:
    """The plan of candidate kernel ``kernel`` with ``config`` (any configuration of its family), with the
    problem's geometry."""
    plan = REGISTRY[kernel].plan(problem, kernel, config, tab)
    return dataclasses.replace(plan, geometry=Geometry.of(problem))


def by_direction(entries) -> dict[str, str]:
    """The kernel of each direction of a group with one kernel per direction (:data:`CHANNELS_FIRST`,
    :data:`DEPTHWISE`)."""
    return {direction: e.name for e in entries for direction in e.directions}


#: The channels-first and the depthwise kernel of each direction.
CHANNELS_FIRST_KERNELS, DEPTHWISE_KERNELS = by_direction(CHANNELS_FIRST), by_direction(DEPTHWISE)
