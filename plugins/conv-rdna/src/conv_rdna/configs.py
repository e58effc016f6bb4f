"""Kernel configurations as data: ``data/configs.json`` read, checked and queried.

The table is the single source of truth for tile sizes, warps, pipeline stages and the split rule
of the weight gradient, per architecture and kernel family. Nothing is autotuned at run time:
:func:`select` picks a configuration from the problem alone, the same one every time.

Layout of the JSON (see the file's ``_doc``)::

    archs.<arch>.same_as            use another architecture's entry (written once, e.g. gfx1151 -> gfx1100)
    archs.<arch>.measured           false until the configurations were timed on that architecture
    archs.<arch>.families.<family>  buckets, first match wins; the last bucket has no condition
    archs.<arch>.layers.<family>    exact problems (problem key without the arch) -> configuration
                                    (plus the measured winners of ``data/swept/<arch>.json``, which the
                                    offline sweep writes; they mark their families measured)
    archs.<arch>.split              the weight gradient's split rule
    archs.<arch>.depthwise_split    the same for the depthwise weight gradient (optional)
    archs.<arch>.few_channels_split the same for the few-channel weight gradients (optional)
    archs.<arch>.winograd_split     the same for Winograd's weight gradient (optional)
    archs.<arch>.reduce             the gather of ``col2im_bwd_data``
    archs.<arch>.sum_splits         the sum of the weight gradient's split partials (:class:`SumSplits`)
    archs.<arch>.efficiency         fractions of the roofline rates, for the estimates

A bucket's ``when`` may bound the family's GEMM view of the problem (:func:`gemm_view`):
``max_m``, ``max_n``, ``max_red`` (inclusive upper bounds) and ``dtypes`` (input dtypes it applies to).
"""

from __future__ import annotations

import functools
import math
import re
import dataclasses
from dataclasses import dataclass

from conv_core.arch import known_architectures, spec
from conv_core.kit.tables import Bucket, PackageData, distinct_configs, read_buckets
from conv_core.kit.tables import select as select_config
from conv_core.problem import ConvProblem, dtype_name, element_size
from conv_core.kit.tables import read_swept

from .kernels.winograd import POINTS_N

#: Depthwise stencil families (``groups == in_channels``): :class:`StencilConfig` entries, not GEMM tiles.
DEPTHWISE_FAMILIES = ("depthwise_fwd", "depthwise_bwd_data", "depthwise_bwd_weight")

#: Weight-gradient families for few input / output channels per group (:mod:`conv_rdna.kernels.few_channels_bwd`):
#: a program owns every tap, so their reductions are split by the table's ``few_channels_split`` rule.
FEW_CHANNELS_BWD_WEIGHT_FAMILIES = ("few_channels_in_bwd_weight", "few_channels_out_bwd_weight")

#: Winograd F(4x4, 3x3)'s transformed points per tile: the batch of its GEMMs.
WINOGRAD_POINTS = POINTS_N**2

#: Conditions a bucket may have (``layouts``: the problem's memory layouts it applies to).
CONDITIONS = ("max_m", "max_n", "max_red", "dtypes", "layouts")

#: Input dtypes the kernels take (the shared-memory check covers every one a bucket may see).
DTYPES = ("float16", "bfloat16", "float32")

#: Table used when the kernels run under Triton's CPU interpreter.
INTERPRETER = "interpreter"
#: Table used for a GPU architecture without an entry of its own.
DEFAULT = "default"


@dataclass(frozen=True)
class TileConfig:
    """One configuration of a tiled kernel."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    @classmethod
    def from_dict(cls, raw: dict) -> TileConfig:
        expected = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"}
        if set(raw) != expected:
            raise ValueError(f"configuration {raw} must have exactly the keys {sorted(expected)}")
        config = cls(raw["BLOCK_M"], raw["BLOCK_N"], raw["BLOCK_K"], raw["GROUP_M"], raw["num_warps"],
                     raw["num_stages"])
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(config, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"configuration {raw}: {name}={value} must be a power of two")
        if min(config.block_m, config.block_n, config.block_k) < 16:
            raise ValueError(f"configuration {raw}: tiles must be at least 16 (the matrix instructions' size)")
        if config.group_m < 1 or config.num_stages < 1:
            raise ValueError(f"configuration {raw}: GROUP_M and num_stages must be >= 1")
        return config

    @property
    def name(self) -> str:
        """Stable short name, part of the kernel id: ``m128n64k32g8w4s2``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}g{self.group_m}"
                f"w{self.num_warps}s{self.num_stages}")

    @classmethod
    def from_name(cls, name: str) -> TileConfig:
        """The configuration called ``name`` (:attr:`name`), for tools that read kernel ids back."""
        return cls(*map(int, re.fullmatch(r"m(\d+)n(\d+)k(\d+)g(\d+)w(\d+)s(\d+)", name).groups()))

    def shared_bytes(self, dtype: str) -> int:
        """Upper bound of the shared memory (LDS) the kernel needs with inputs of ``dtype``.

        Operand tiles ``BLOCK_M x BLOCK_K`` and ``BLOCK_K x BLOCK_N`` per pipeline stage, or the float32
        accumulator tile when the epilogue passes it through shared memory for a layout change.
        The compile test checks this bound against what the compiler reports.
        """
        operands = (self.block_m + self.block_n) * self.block_k * element_size(dtype) * max(self.num_stages, 1)
        return max(operands, self.block_m * self.block_n * 4)


@dataclass(frozen=True)
class StencilConfig:
    """One configuration of a depthwise stencil kernel (no matrix units, nothing staged in shared memory).

    Forward and data gradient: a ``BLOCK_H x BLOCK_W`` block of pixels x ``BLOCK_C`` channels per program
    (``BLOCK_T`` = 1), each thread sliding the filter along ``SLIDE`` (1 or 4) consecutive output columns
    where the stride and dilation along W are 1. Weight gradient: ``BLOCK_T`` taps x ``BLOCK_C`` channels
    per program, walking its pixels ``BLOCK_W`` at a time (``BLOCK_H`` = ``SLIDE`` = 1). Any power of two
    (a channel block may be narrower than a matrix instruction: NCHW tiles want few channels, many pixels).
    """

    block_h: int
    block_w: int
    block_c: int
    block_t: int
    slide: int
    num_warps: int
    num_stages: int

    @classmethod
    def from_dict(cls, raw: dict) -> StencilConfig:
        expected = {"BLOCK_H", "BLOCK_W", "BLOCK_C", "BLOCK_T", "SLIDE", "num_warps", "num_stages"}
        if set(raw) != expected:
            raise ValueError(f"configuration {raw} must have exactly the keys {sorted(expected)}")
        config = cls(raw["BLOCK_H"], raw["BLOCK_W"], raw["BLOCK_C"], raw["BLOCK_T"], raw["SLIDE"], raw["num_warps"],
                     raw["num_stages"])
        for name in ("block_h", "block_w", "block_c", "block_t", "num_warps"):
            value = getattr(config, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"configuration {raw}: {name}={value} must be a power of two")
        if config.slide not in (1, 4) or config.slide > config.block_w:
            raise ValueError(f"configuration {raw}: SLIDE must be 1 or 4, at most BLOCK_W")
        if config.num_stages < 1:
            raise ValueError(f"configuration {raw}: num_stages must be >= 1")
        return config

    @property
    def name(self) -> str:
        """Stable short name, part of the kernel id: ``16x16c32t1v4w8s1`` (pixels HxW, channels, taps,
        the slide ``v`` when not 1, warps, stages)."""
        slide = f"v{self.slide}" if self.slide > 1 else ""
        return (f"{self.block_h}x{self.block_w}c{self.block_c}t{self.block_t}{slide}"
                f"w{self.num_warps}s{self.num_stages}")

    def shared_bytes(self, dtype: str) -> int:
        """Upper bound of the shared memory: nothing is staged; the compiler may pass a float32 tile (all
        of a program's accumulators) through shared memory for a layout change or the weight gradient's
        final pixel sum."""
        return self.block_t * self.block_h * self.block_w * self.block_c * 4


def config_dict(config: TileConfig | StencilConfig) -> dict:
    """A configuration as the tables write it: the inverse of ``from_dict`` (``num_warps``, ``num_stages`` as
    they are, every other field upper-cased), for the tools that write tables."""
    return {f.name if f.name.startswith("num_") else f.name.upper(): getattr(config, f.name)
            for f in dataclasses.fields(config)}


#: Families whose table entries are not :class:`TileConfig`.
CONFIG_TYPES = {family: StencilConfig for family in DEPTHWISE_FAMILIES}


@dataclass(frozen=True)
class SplitRule:
    """How many ranges the weight gradient's reduction is split into (see :func:`split_count`)."""

    #: programs (tiles x splits) to aim for
    target_programs: int
    #: most splits
    max_split: int
    #: fewest ``BLOCK_K`` steps a split reduces
    min_blocks_per_split: int

    def count(self, tiles: int, blocks: int, *limits: int) -> int:
        """Splits of a reduction of ``blocks`` steps over ``tiles`` output tiles: enough for ``target_programs``,
        at most ``max_split`` and each at least ``min_blocks_per_split`` steps, within ``limits``; at least 1."""
        split = math.ceil(self.target_programs / tiles)
        return max(min(split, self.max_split, blocks // self.min_blocks_per_split, *limits), 1)


@dataclass(frozen=True)
class SumSplits:
    """The tile of ``reduce_splits``: ``BLOCK`` float32 values a step, up to ``SPLIT_ROWS`` splits at once
    (:func:`conv_rdna.plans.common.sum_splits_rows`) of ``BLOCK // rows`` elements each, on ``num_warps`` warps."""

    BLOCK: int
    SPLIT_ROWS: int
    num_warps: int


@dataclass(frozen=True)
class ArchTable:
    """The configurations of one architecture (``same_as`` resolved)."""

    name: str
    source: str
    measured: bool
    families: dict[str, tuple[Bucket, ...]]
    layers: dict[str, dict[str, TileConfig]]
    split: SplitRule
    reduce_block: int
    reduce_warps: int
    #: the tile of ``reduce_splits``, which sums the weight gradient's float32 partials
    sum_splits: SumSplits
    #: candidate kernel -> {"compute": fraction, "memory": fraction}; "channels_first_factor" -> float
    efficiency: dict
    #: the depthwise weight gradient's split rule (few output tiles: it needs many more splits)
    depthwise_split: SplitRule | None = None
    #: the few-channel weight gradients' split rule (one tile or a few hold every tap: many more splits)
    few_channels_split: SplitRule | None = None
    #: Winograd's weight-gradient split rule (its 36 GEMMs reduce over tiles: the direct kernels' rule was
    #: re-measured on the H100 after Winograd's had been, so each family keeps the rule it was timed with)
    winograd_split: SplitRule | None = None
    #: families whose exact-layer configurations were timed on this architecture by the offline sweep
    measured_families: frozenset[str] = frozenset()
    #: whether the channels-first kernels may leave their loads to the compiler's pipeliner, which turns them
    #: into asynchronous copies (:func:`conv_rdna.plans.channels_first.pipelined_pixels`)
    channels_first_async_copies: bool = False
    #: Winograd's transform kernels' blocks (``winograd_transforms``: ``BLOCK_T``, ``BLOCK_C``, ``num_warps``)
    winograd_transforms: dict | None = None

    def is_measured(self, family: str) -> bool:
        """Whether ``family``'s configurations were timed on this architecture (else its candidates are
        tagged experimental there)."""
        return self.measured or family in self.measured_families

    def configs(self, family: str) -> tuple[TileConfig, ...]:
        """Every configuration the table can give ``family``, each once, in table order."""
        return distinct_configs(self.families[family], self.layers.get(family, {}))


# ---- reading --------------------------------------------------------------------------------------


#: The package's data: ``configs.json``, the swept winners, the shipped tuning tables.
DATA = PackageData("conv_rdna", "rdna")


def _raw() -> dict:
    return DATA.json()


def table_names() -> tuple[str, ...]:
    """Every table in the file: the architectures plus ``interpreter`` and ``default``."""
    return tuple(_raw()["archs"])


@functools.cache
def table(name: str) -> ArchTable:
    """The table called ``name`` (an architecture, ``interpreter`` or ``default``), checked."""
    return build_table(_raw()["archs"], name, _swept(name), "configs.json")


def build_table(archs: dict, name: str, swept: dict, file: str) -> ArchTable:
    """Table ``name`` of ``archs`` (the ``archs`` object of a configuration file in this module's format, named
    ``file`` in errors), ``same_as`` resolved, with the measured exact-layer winners ``swept`` on top: the one
    reader of the format, shared with the backends that run these kernels with tables of their own (conv-cdna)."""
    entry, source = dict(archs[name]), name
    while "same_as" in entry:  # the base entry, overridden by the keys the derived entry gives
        source = entry.pop("same_as")
        entry = {**archs[source], **entry}
    families = {family: read_buckets(raw, CONFIG_TYPES.get(family, TileConfig).from_dict,
                                      f"{file} {source}.{family}", CONDITIONS)
                for family, raw in entry["families"].items()}
    measured = bool(entry["measured"])
    measured_families = frozenset(swept.get("layers", {})) if swept.get("measured") else frozenset()
    raw_layers = {family: {**entry.get("layers", {}).get(family, {}), **swept.get("layers", {}).get(family, {})}
                  for family in {*entry.get("layers", {}), *swept.get("layers", {})}}
    layers = {family: {key: CONFIG_TYPES.get(family, TileConfig).from_dict(c) for key, c in entries.items()}
              for family, entries in raw_layers.items()}

    def rule(key: str) -> SplitRule | None:
        return SplitRule(**entry[key]) if key in entry else None

    reduce = entry["reduce"]
    return ArchTable(name, source, measured, families, layers, rule("split"), reduce["BLOCK"],
                     reduce["num_warps"], SumSplits(**entry["sum_splits"]), entry["efficiency"],
                     depthwise_split=rule("depthwise_split"), few_channels_split=rule("few_channels_split"),
                     winograd_split=rule("winograd_split"), measured_families=measured_families,
                     channels_first_async_copies=entry.get("channels_first_async_copies", False),
                     winograd_transforms=entry.get("winograd_transforms"))


def swept_path(name: str):
    """Where the sweep's measured exact-layer winners for table ``name`` live (``data/swept/<name>.json``)."""
    return DATA.swept_path(name)


def _swept(name: str) -> dict:
    """The sweep's file for ``name`` (written by ``python -m conv_rdna.sweep merge``), or nothing."""
    return read_swept(swept_path(name))


def table_for(arch: str, interpreted: bool) -> ArchTable:
    """The table for a device: the interpreter's, the architecture's own, or the default one."""
    if interpreted:
        return table(INTERPRETER)
    return table(arch if arch in _raw()["archs"] else DEFAULT)


def shared_memory_limit(name: str) -> int | None:
    """The shared-memory limit a table must respect: its architecture's (None for the interpreter).

    The ``default`` table must fit the smallest limit of any architecture conv-core knows (its stand-in
    ``generic`` entry included).
    """
    if name == INTERPRETER:
        return None
    if name == DEFAULT:
        return min(spec(a).shared_memory_bytes for a in known_architectures() if spec(a).shared_memory_bytes)
    return spec(name).shared_memory_bytes


def reachable_dtypes(tab: ArchTable, family: str, dtypes: tuple[str, ...] = DTYPES) -> dict[TileConfig, list[str]]:
    """Each configuration of a family and the input dtypes (of ``dtypes``: those the backend takes) whose problems
    can reach it.

    A bucket conditioned on dtypes alone (or on nothing) takes every problem of its dtypes, so later
    buckets never see those dtypes. An exact-layer entry is reached by its layer's dtype alone.
    """
    reach: dict[TileConfig, set[str]] = {}
    open_dtypes = set(dtypes)
    for bucket in tab.families[family]:
        taken = open_dtypes & set(bucket.when.get("dtypes", dtypes))
        reach.setdefault(bucket.config, set()).update(taken)
        if set(bucket.when) <= {"dtypes"}:
            open_dtypes -= taken
    for key, config in tab.layers.get(family, {}).items():  # an exact layer is reached by its own dtype only
        if _layer_dtype(key) in dtypes:
            reach.setdefault(config, set()).add(_layer_dtype(key))
    return {config: [d for d in dtypes if d in taken] for config, taken in reach.items() if taken}


def _layer_dtype(key: str) -> str:
    """The input dtype named by an exact-layer key (``ConvProblem.key`` without the arch)."""
    return dtype_name(key.split()[10].split(".")[0])


# ---- choosing -------------------------------------------------------------------------------------


def gemm_view(problem: ConvProblem, family: str) -> dict[str, int]:
    """The sizes a family's buckets are chosen on, per group.

    ``m`` and ``n``: the rows and columns of the output tile grid; ``red``: the length of the
    reduction a tile walks *per tap* (channels; pixels for the weight gradient).
    """
    g = problem.groups
    cin, cout = problem.in_channels // g, problem.out_channels // g
    pixels_in = problem.batch * math.prod(problem.input_size)
    pixels_out = problem.batch * math.prod(problem.output_size)
    if family == "implicit_gemm":
        return {"m": pixels_out, "n": cout, "red": cin}
    if family in ("gemm1x1", "conv3x3"):  # the forward, or the data gradient (which produces dx)
        if problem.direction == "fwd":
            return {"m": pixels_out, "n": cout, "red": cin}
        return {"m": pixels_in, "n": cin, "red": cout}
    if family == "bwd_data":
        return {"m": pixels_in // math.prod(problem.stride), "n": cin, "red": cout}
    if family == "implicit_gemm_cf":  # pixel tiles of one image; the data gradient produces dx
        if problem.direction == "fwd":
            return {"m": pixels_out // problem.batch, "n": cout, "red": cin}
        return {"m": pixels_in // problem.batch, "n": cin, "red": cout}
    if family == "bwd_weight_cf":  # pixel blocks of one image
        return {"m": cout, "n": cin, "red": pixels_out // problem.batch}
    if family == "bwd_weight":
        return {"m": cout, "n": cin, "red": pixels_out}
    if family in DEPTHWISE_FAMILIES:  # pixels per image (of the tile grid), channels, taps; and the layout
        pixels = math.prod(problem.input_size if family == "depthwise_bwd_data" else problem.output_size)
        return {"m": pixels, "n": problem.out_channels, "red": math.prod(problem.filter_size),
                "layout": problem.layout}
    if family == "few_channels_in":  # the reduction runs over (tap, channel) pairs jointly
        return {"m": pixels_out, "n": cout, "red": cin * math.prod(problem.filter_size)}
    if family == "few_channels_out":  # columns: every tap of every output channel; reduction: channels
        return {"m": pixels_out, "n": cout * math.prod(problem.filter_size), "red": cin}
    taps = math.prod(problem.filter_size)
    if family == "few_channels_in_bwd_weight":  # columns: (tap, input channel) pairs; reduction: output pixels
        return {"m": cout, "n": cin * taps, "red": pixels_out}
    if family == "few_channels_out_bwd_weight":  # rows: (output channel, tap); reduction: input pixels
        return {"m": cout * taps, "n": cin, "red": pixels_in}
    if family == "col2im_bwd_data":  # Z = dy @ w: dy's pixels x every (channel, tap) column, reduced over dy's channels
        return {"m": pixels_out, "n": cin * taps, "red": cout}
    if family in ("few_channels_in_bwd_data", "few_channels_out_bwd_data"):
        # The forward kernels' view of the forward convolution of dy of one stride phase: its pixels, and its
        # taps (every stride-th one, the largest phase's count); few_channels_out's view, or few_channels_in's.
        phase_pixels = pixels_in // math.prod(problem.stride)
        phase_taps = math.prod(-(-f // s) for f, s in zip(problem.filter_size, problem.stride))
        if family == "few_channels_in_bwd_data":
            return {"m": phase_pixels, "n": cin * phase_taps, "red": cout}
        return {"m": phase_pixels, "n": cin, "red": cout * phase_taps}
    if family == "grouped":  # per group: the forward, or a stride phase of the data gradient on dy
        if problem.direction == "fwd":
            return {"m": pixels_out, "n": cout, "red": cin}
        return {"m": pixels_in // math.prod(problem.stride), "n": cin, "red": cout}
    if family == "grouped_bwd_weight":
        return {"m": cout, "n": cin, "red": pixels_out}
    if family == "winograd":  # the 36 GEMMs: 4x4 tiles of the result x its channels, reduced over the others
        forward = problem.direction == "fwd"
        tiles = problem.batch * math.prod(-(-size // 4) for size in (problem.output_size if forward
                                                                     else problem.input_size))
        return {"m": tiles, "n": cout, "red": cin} if forward else {"m": tiles, "n": cin, "red": cout}
    if family == "winograd_bwd_weight":  # the 36 GEMMs: output x input channels, reduced over dy's 4x4 tiles
        tiles = problem.batch * math.prod(-(-size // 4) for size in problem.output_size)
        return {"m": cout, "n": cin, "red": tiles}
    raise ValueError(f"unknown kernel family {family!r}")


def select(tab: ArchTable, family: str, problem: ConvProblem) -> TileConfig:
    """The configuration for ``problem``: its exact-layer entry, else the same layer's at another batch or image
    size (no other kernel to compile), else the first matching bucket (:func:`conv_core.kit.tables.select`)."""
    return select_config(tab.families[family], tab.layers.get(family, {}), problem,
                         lambda: gemm_view(problem, family))


def split_count(tab: ArchTable, problem: ConvProblem, config: TileConfig, int32_elements: int,
                family: str = "bwd_weight") -> int:
    """Number of reduction ranges for the weight gradient of ``problem`` by ``family``'s kernel.

    Enough programs to reach the table's ``target_programs`` (tiles x splits), but at least
    ``min_blocks_per_split`` ``BLOCK_K`` steps per split, at most ``max_split``, and a workspace of
    ``splits x weight elements`` that float32 int32 indexing can address (``int32_elements``). The general
    families own one tap per tile; the few-channel ones every tap of their rows or columns
    (:func:`gemm_view`), so they have few tiles and take the table's ``few_channels_split`` rule, which
    allows many more splits, over the pixels they reduce (the input pixels for ``few_channels_out``).
    Winograd's weight gradient (``winograd_bwd_weight``) splits its 36 GEMMs' reduction over tiles by the
    table's ``winograd_split`` rule (the general one where there is none); its partial results are 36 / 9 times
    the weight.
    """
    numel = math.prod(problem.weight_shape)
    if family in FEW_CHANNELS_BWD_WEIGHT_FAMILIES:
        rule, view = tab.few_channels_split or tab.split, gemm_view(problem, family)
        tiles = math.ceil(view["m"] / config.block_m) * math.ceil(view["n"] / config.block_n) * problem.groups
        pixels = view["red"]
    elif family == "winograd_bwd_weight":
        rule, view = tab.winograd_split or tab.split, gemm_view(problem, family)
        tiles = WINOGRAD_POINTS * math.ceil(view["m"] / config.block_m) * math.ceil(view["n"] / config.block_n)
        pixels, numel = view["red"], WINOGRAD_POINTS * view["m"] * view["n"]
    else:
        rule, g = tab.split, problem.groups
        cin, cout = problem.in_channels // g, problem.out_channels // g
        tiles = (math.ceil(cout / config.block_m) * math.ceil(cin / config.block_n)
                 * math.prod(problem.filter_size) * g)
        pixels = problem.batch * math.prod(problem.output_size)
    return rule.count(tiles, math.ceil(pixels / config.block_k), int32_elements // numel, 65535)


def depthwise_split_count(tab: ArchTable, problem: ConvProblem, config: StencilConfig, int32_elements: int) -> int:
    """Number of pixel ranges for the depthwise weight gradient (the table's ``depthwise_split`` rule).

    A program owns ``BLOCK_T`` taps x ``BLOCK_C`` channels (x one multiplier index), so a layer has few
    output tiles (ConvNeXt's 96 channels x 49 taps: 3) and the pixels must be split much further than for
    a GEMM: enough programs for ``target_programs``, at least ``min_blocks_per_split`` chunks of
    ``BLOCK_W`` pixels of a row per split, at most ``max_split`` and at most one split per output row
    (splits are ranges of rows), and a workspace of ``splits x weight elements`` within 32-bit offsets.
    """
    rule = tab.depthwise_split or tab.split
    tiles = (math.ceil(math.prod(problem.filter_size) / config.block_t)
             * math.ceil(problem.in_channels / config.block_c) * (problem.out_channels // problem.groups))
    *rows, cols = (problem.batch, *problem.output_size)
    blocks = math.prod(rows) * math.ceil(cols / config.block_w)
    return rule.count(tiles, blocks, math.prod(rows), int32_elements // math.prod(problem.weight_shape))
