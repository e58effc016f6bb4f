"""conv-gluon's kernels: one :class:`~conv_core.kit.registry.KernelEntry` each, in the order they are offered.

Everything that lists kernels reads this: the candidates (:mod:`conv_gluon.candidates`), the families with
configuration tables (:mod:`conv_gluon.configs`), the offline sweep's space (:mod:`conv_gluon.sweep`), the
compile checks' jobs (:mod:`conv_gluon.aot`) and the README's kernel table (:meth:`Registry.markdown_table`,
checked by ``tests/test_registry.py``). The data gradient runs the forward kernel once per stride phase, so its
kernels take the forward's configuration families.

Each direction's gathering kernel runs every problem the backend takes, 3D (NDHWC) included; the box kernels need
TMA boxes to carry their input (1D and 2D; 3D only those of :data:`conv_gluon.plans.BOXES_3D`), and the
kernels of a filter column (``*_rows_box``) a filter of 3 rows (``applies``: the reason, from
:func:`conv_gluon.plans.kernel_issue` with the configuration the table picks).
"""

from __future__ import annotations

from conv_core.kit.registry import KernelEntry, Registry
from conv_core.problem import ConvProblem

from . import configs, plans
from .estimates import forward_estimate, weight_grad_estimate

#: The tensors the kernels read and write.
LAYOUTS = ("channels_last",)


class TableIssue:
    """``applies`` of a kernel whose support depends on its configuration: :func:`plans.kernel_issue` with the
    configuration the architecture's table picks for ``family``."""

    def __init__(self, kernel: str, family: str) -> None:
        self.kernel, self.family = kernel, family

    def __call__(self, problem: ConvProblem) -> str | None:
        tab = configs.table_for(problem.arch)
        if tab is None:
            return f"no configuration table for {problem.arch}"
        return plans.kernel_issue(problem, self.kernel, configs.select(tab, self.family, problem), tab)


def forward_plan(problem: ConvProblem, entry: KernelEntry, config: configs.TileConfig,
                 tab: configs.ArchTable) -> plans.Plan:
    return plans.make_plan(problem, entry.name, config, tab)


def data_grad_plan(problem: ConvProblem, entry: KernelEntry, config: configs.TileConfig,
                   tab: configs.ArchTable) -> plans.DataGradPlan:
    return plans.make_bwd_data_plan(problem, entry.name, config, tab)


def weight_grad_plan(problem: ConvProblem, entry: KernelEntry, config: configs.TileConfig,
                     tab: configs.ArchTable) -> plans.WeightGradPlan:
    return plans.make_bwd_weight_plan(problem, entry.name, config, tab)


def _entry(name: str, family: str, direction: str, summary: str) -> KernelEntry:
    """One kernel: its plan builder and estimate are its direction's; a gathering kernel applies always."""
    build, estimate = {"fwd": (forward_plan, forward_estimate), "bwd_data": (data_grad_plan, forward_estimate),
                       "bwd_weight": (weight_grad_plan, weight_grad_estimate)}[direction]
    extra = {} if name.endswith("_gather") else {"applies": TableIssue(name, family)}
    return KernelEntry(name, family, (direction,), summary, build, estimate, layouts=LAYOUTS, **extra)


REGISTRY = Registry([
    _entry("fwd_gather", "fwd_gather", "fwd",
           "forward, any 1D/2D/3D geometry (stride, dilation, asymmetric padding, groups): a persistent implicit "
           "GEMM whose producer partition (4 warps) gathers the input tile with `cp.async` (or through registers for "
           "odd channel counts) while a warp-group consumer runs asynchronous `wgmma`; 3D rows decode `(n, z, p, q)` "
           "and the taps walk `(t, r, s)`"),
    _entry("fwd_box", "fwd_box", "fwd",
           "forward at stride 1 with channels a multiple of 8: the input tile is a box of output pixels, "
           "loaded by TMA (padding and channel tails zero-filled by the hardware); one producer warp; 3D (any depth "
           "stride): boxes of one output plane, each depth tap's from its input plane (experimental: not yet run "
           "on the hardware)"),
    _entry("fwd_rows_box", "fwd_rows_box", "fwd",
           "the same for filters of 3 rows, a k-step per filter column: one tall box (the tile's box and the rows "
           "below it) read by the column's three taps as views a row of taps apart, each against its weight tile "
           "(42% fewer bytes from L2 than per-tap boxes at 256 x 128); two rings; 16-bit dense outputs stored by "
           "TMA from shared memory, overlapping the next tile"),
    _entry("bwd_data_gather", "fwd_gather", "bwd_data",
           "data gradient, any 1D/2D/3D geometry: the same kernel once per stride phase (3D: depth x height x width "
           "phases), on `dy` and the weight "
           "transposed per group and restricted to the phase's taps (exact taps, nothing masked away; tap-less "
           "phases zero-filled)"),
    _entry("bwd_data_box", "fwd_box", "bwd_data",
           "the same with `dy` as TMA boxes (every phase is stride 1; output channels a multiple of 8); 3D: "
           "`fwd_box`'s boxes per depth phase (experimental: not yet run on the hardware)"),
    _entry("bwd_data_rows_box", "fwd_rows_box", "bwd_data",
           "the same through `fwd_rows_box`, for 3-row filters at stride 1 along the height (every phase keeps the "
           "3 rows)"),
    _entry("bwd_weight_gather", "bwd_weight_gather", "bwd_weight",
           "weight gradient, any 1D/2D/3D geometry: per filter tap a GEMM (output x input channels) over the pixels; "
           "producer warps do the conv-to-GEMM addressing and the loads (`dy` rows by TMA, `x` gathered with "
           "`cp.async`), a consumer warpgroup only runs `wgmma` (`dy` as the transposed A operand); the pixels "
           "split into ranges whose float32 partials a second kernel sums in split order"),
    _entry("bwd_weight_box", "bwd_weight_box", "bwd_weight",
           "the same at stride 1 with input channels a multiple of 8: `dy` and `x` as TMA boxes of output pixels "
           "(one producer warp); 3D (any depth stride): boxes of one output plane, `x`'s in each depth tap's input "
           "plane (experimental: not yet run on the hardware)"),
    _entry("bwd_weight_rows_box", "bwd_weight_rows_box", "bwd_weight",
           "the same for filters of 3 rows, a unit per filter column: its three taps share each step's `dy` box, "
           "and `x` comes as two boxes stacked (three pixel tiles loaded where per-tap units load six); three "
           "accumulators"),
])


def gathering(direction: str) -> KernelEntry:
    """``direction``'s gathering kernel: the one that runs every problem the backend takes."""
    return REGISTRY.for_direction(direction)[0]
