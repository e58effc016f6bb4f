"""Kernel configurations and architecture limits as data: ``data/configs.json`` read, checked and queried.

Nothing is autotuned at run time: :func:`select` picks a configuration from the problem alone, the same one
every time, from the table measured (or, while ``measured`` is false, reasoned) for the architecture.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from conv_core.kit import tables
from conv_core.kit.tables import Bucket, PackageData
from conv_core.problem import ConvProblem

#: The package's ``data/``: ``configs.json``, the sweep's space and winners, the shipped tuning tables.
DATA = PackageData("conv_gluon", "gluon")


#: The families of the weight-gradient kernel (``kernels/bwd_weight.py``) are named so in the registry
#: (:mod:`conv_gluon.registry`, whose tests check it): their tiles are read differently.
WEIGHT_GRAD_PREFIX = "bwd_weight_"


def is_weight_grad(family: str) -> bool:
    """Whether ``family``'s configurations are the weight-gradient kernel's."""
    return family.startswith(WEIGHT_GRAD_PREFIX)

#: float32 accumulator tiles per consumer thread, per family: one, but three for the units of a filter column
#: (one per filter row).
ACCUMULATORS = {"bwd_weight_rows_box": 3}

#: Most accumulator registers per consumer thread (all tiles together): beyond, the epilogue spilled.
MAX_ACCUMULATOR_REGISTERS = 128

#: Conditions a bucket may have.
CONDITIONS = ("max_m", "max_n", "max_red", "n_multiple_of", "dtypes")

#: Input dtypes the kernels take.
DTYPES = ("float16", "bfloat16")

#: Ways the forward producer brings the input tile (``kernels/fwd.py``), each with a producer budget.
A_MODES = ("cp_async", "registers", "tma_box")


@dataclass(frozen=True)
class TileConfig:
    """One configuration of a kernel: for the forward, a ``BLOCK_M`` (pixels) x ``BLOCK_N`` (output channels)
    tile reduced ``BLOCK_K`` input channels per k-step; for the weight gradient, a ``BLOCK_M`` (output
    channels) x ``BLOCK_N`` (input channels) tile of ``dW`` reduced ``BLOCK_K`` pixels per k-step."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    group_m: int
    num_warps: int

    KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "num_warps")

    @classmethod
    def from_dict(cls, raw: dict, family: str = "fwd_gather") -> TileConfig:
        if set(raw) != set(cls.KEYS):
            raise ValueError(f"configuration {raw} must have exactly the keys {sorted(cls.KEYS)}")
        config = cls(*(raw[k] for k in cls.KEYS))
        config.check(family)
        return config

    def _need(self, ok: bool, why: str) -> None:
        if not ok:
            raise ValueError(f"configuration {self.name}: {why}")

    def check(self, family: str = "fwd_gather") -> None:
        """The shapes ``family``'s kernel can take (raises ``ValueError`` naming the offending field)."""
        need = self._need
        need(self.num_warps in (4, 8), "num_warps must be 4 (one consumer warpgroup) or 8 (two)")
        need(self.stages >= 2, "STAGES must be at least 2")
        need(self.group_m >= 1, "GROUP_M must be at least 1")
        tiles = ACCUMULATORS.get(family, 1)
        need(tiles * self.block_m * self.block_n // (32 * self.num_warps) <= MAX_ACCUMULATOR_REGISTERS,
             f"the float32 accumulator{'s' if tiles > 1 else ''} must stay within "
             f"{MAX_ACCUMULATOR_REGISTERS} registers per consumer thread")
        if is_weight_grad(family):
            self._check_weight_grad()
        else:
            self._check_forward()
        need(all(b & (b - 1) == 0 for b in (self.block_m, self.block_n, self.block_k)),
             "BLOCK_M, BLOCK_N and BLOCK_K must be powers of two (Gluon tensor shapes)")

    def _check_forward(self) -> None:
        """The forward's tile: ``BLOCK_M`` pixels over the warpgroups' 64-row ``wgmma``s, ``BLOCK_N`` output
        channels as the ``wgmma`` N, ``BLOCK_K`` input channels per k-step."""
        need = self._need
        groups = self.num_warps // 4
        need(self.block_m in (64, 128, 256), "BLOCK_M must be 64, 128 or 256 (wgmma rows: 64 per instruction)")
        need(self.block_m >= 128, "BLOCK_M must be at least 128: the single-element gather gives each of the "
                                  "4 producer warps' 128 threads a row")
        need(self.block_n % (8 * groups) == 0 and 8 <= self.block_n // groups <= 256,
             "BLOCK_N / warpgroups must be a multiple of 8 in 8..256 (wgmma N)")
        need(self.block_k in (16, 32, 64), "BLOCK_K must be 16, 32 or 64 (16-bit rows of at most 128 bytes: "
                                           "one swizzle line, the widest TMA box row)")

    def _check_weight_grad(self) -> None:
        """The weight gradient's tile: ``BLOCK_M`` output channels split into 64-row ``wgmma``s per
        warpgroup, ``BLOCK_N`` input channels as the ``wgmma`` N (per warpgroup when two share N), ``BLOCK_K``
        pixels: a multiple of the ``wgmma`` K (16) and of a swizzle's 8 rows, within a TMA box dimension."""
        need = self._need
        warps_n = max(1, min(self.num_warps // 4, self.block_n // 128))  # tiling.warpgroup_split
        rows_per_group = self.block_m // (self.num_warps // 4 // warps_n)
        need(self.block_m in (64, 128, 256) and rows_per_group % 64 == 0,
             "BLOCK_M must be 64, 128 or 256 and give each consumer warpgroup a multiple of 64 rows (wgmma M)")
        need(self.block_n % (8 * warps_n) == 0 and 8 <= self.block_n // warps_n <= 256,
             "BLOCK_N / warpgroups along N must be a multiple of 8 in 8..256 (wgmma N)")
        need(self.block_k in (32, 64, 128), "BLOCK_K must be 32, 64 or 128 pixels (wgmma K steps of 16, whole "
                                            "swizzle rows, a TMA box dimension of at most 256)")

    def as_dict(self) -> dict:
        """The configuration as ``configs.json`` writes it."""
        return dict(zip(self.KEYS, (self.block_m, self.block_n, self.block_k, self.stages, self.group_m,
                                    self.num_warps)))

    @property
    def name(self) -> str:
        """Stable short name, part of the kernel id: ``m128n256k64s4w8g8``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}s{self.stages}w{self.num_warps}"
                f"g{self.group_m}")


@dataclass(frozen=True)
class Producer:
    """The producer partition's warps and registers per thread for one way of bringing the input."""

    warps: int
    regs: int


@dataclass(frozen=True)
class WeightGradLimits:
    """How the weight gradient's reduction is split (``tiling.choose_split_steps``) and summed back."""

    unit_overhead_steps: float
    min_split_steps: int
    max_splits: int
    max_workspace_bytes: int
    #: the second stage: elements per program and warps
    reduce_block: int
    reduce_warps: int
    #: the producer partition per way of bringing x (it decodes every k-step's pixels: more registers)
    producers: dict[str, Producer]


@dataclass(frozen=True)
class ArchTable:
    """The configurations and limits of one architecture."""

    name: str
    measured: bool
    num_sms: int
    registers_per_sm: int
    max_registers_per_thread: int
    producers: dict[str, Producer]
    box_widths: tuple[int, ...]
    #: (min BLOCK_N, widths): the box widths of wide tiles
    box_widths_wide: tuple[int, tuple[int, ...]]
    families: dict[str, tuple[Bucket, ...]]
    #: candidate kernel -> {"compute": fraction, "memory": fraction}
    efficiency: dict
    weight_grad: WeightGradLimits
    #: family -> layer key (:func:`conv_core.kit.tables.layer_key`) -> the offline sweep's measured winner
    layers: dict[str, dict[str, TileConfig]] = dataclasses.field(default_factory=dict)

    def is_measured(self, family: str) -> bool:
        """Whether ``family``'s configurations were timed on this architecture: the whole table marked
        measured, or the family swept (``python -m conv_gluon.sweep``); else its candidates are experimental."""
        return self.measured or family in self.layers

    def box_widths_for(self, block_n: int) -> tuple[int, ...]:
        """The box widths a tile of ``block_n`` output channels may take."""
        min_n, widths = self.box_widths_wide
        return widths if block_n >= min_n else self.box_widths

    def configs(self, family: str) -> tuple[TileConfig, ...]:
        """Every configuration the table can give ``family`` (buckets, then swept layers), each once."""
        return tables.distinct_configs(self.families[family], self.layers.get(family, {}))


def table_names() -> tuple[str, ...]:
    return tuple(DATA.json()["archs"])


@functools.cache
def table(name: str) -> ArchTable:
    """The table of architecture ``name``, checked."""
    entry = DATA.json()["archs"][name]
    by_family = {family: tables.read_buckets(entry["families"][family],
                                             functools.partial(TileConfig.from_dict, family=family),
                                             f"configs.json {name}.{family}", CONDITIONS)
                 for family in entry["families"]}
    producers = {mode: Producer(**entry["producers"][mode]) for mode in A_MODES}
    widths = tuple(entry["box_widths"])
    wide = entry.get("box_widths_wide", {"min_block_n": 1 << 30, "widths": widths})
    wide = (int(wide["min_block_n"]), tuple(wide["widths"]))
    if any(w % 8 for w in widths + wide[1]):
        raise ValueError(f"configs.json {name}: box widths {widths}, {wide[1]} must be multiples of 8")
    regs = entry["registers"]
    return ArchTable(name, bool(entry["measured"]), int(entry["num_sms"]), int(regs["per_sm"]),
                     int(regs["max_per_thread"]), producers, widths, wide, by_family, entry["efficiency"],
                     _weight_grad_limits(name, entry["bwd_weight"]), _swept_layers(name))


def _swept_layers(name: str) -> dict[str, dict[str, TileConfig]]:
    """The sweep's winners for architecture ``name`` (none until it was swept), checked like the buckets."""
    swept = DATA.swept_layers(name)
    unknown = sorted(set(swept) - set(DATA.json()["archs"][name]["families"]))
    if unknown:
        raise ValueError(f"data/swept/{name}.json: unknown families {unknown}")
    return {family: {key: TileConfig.from_dict(raw, family) for key, raw in entries.items()}
            for family, entries in swept.items()}


def _weight_grad_limits(name: str, raw: dict) -> WeightGradLimits:
    split, reduce = raw["split"], raw["reduce"]
    producers = {mode: Producer(**raw["producers"][mode]) for mode in A_MODES}
    limits = WeightGradLimits(float(split["unit_overhead_steps"]), int(split["min_split_steps"]),
                              int(split["max_splits"]), int(split["max_workspace_mb"]) << 20, int(reduce["BLOCK"]),
                              int(reduce["num_warps"]), producers)
    if limits.max_workspace_bytes // 4 > 2**31 - 1 or limits.max_splits < 1 or limits.min_split_steps < 1:
        raise ValueError(f"configs.json {name}.bwd_weight: max_workspace_mb must keep the float32 partials within "
                         "32-bit offsets (8 GiB); max_splits and min_split_steps at least 1")
    if limits.reduce_block % (32 * limits.reduce_warps):
        raise ValueError(f"configs.json {name}.bwd_weight.reduce: BLOCK must be a multiple of 32 x num_warps")
    return limits


def table_for(arch: str) -> ArchTable | None:
    """The table of ``arch`` (``sm_90a`` reads ``sm_90``'s), or None if the plugin has none."""
    name = arch[:-1] if arch.endswith("a") else arch
    return table(name) if name in DATA.json()["archs"] else None


def gemm_view(problem: ConvProblem) -> dict[str, int]:
    """What the buckets are chosen on, per group: ``m`` output pixels, ``n`` output channels, ``red`` input
    channels (the reduction per tap) of the forward launch; for the data gradient, of one stride phase's
    launch (``dx`` pixels per phase, the input channels as output, the output channels reduced); for the
    weight gradient, its per-tap GEMM (``m`` output channels, ``n`` input channels, ``red`` output pixels)."""
    g = problem.groups
    if problem.direction == "bwd_weight":
        return {"m": problem.out_channels // g, "n": problem.in_channels // g,
                "red": problem.batch * math.prod(problem.output_size)}
    if problem.direction == "bwd_data":
        return {"m": problem.batch * math.prod(problem.input_size) // math.prod(problem.stride),
                "n": problem.in_channels // g, "red": problem.out_channels // g}
    return {"m": problem.batch * math.prod(problem.output_size), "n": problem.out_channels // g,
            "red": problem.in_channels // g}


def select(tab: ArchTable, family: str, problem: ConvProblem) -> TileConfig:
    """The configuration for ``problem`` (:func:`conv_core.kit.tables.select`): its measured exact-layer entry,
    else the same layer's at the nearest batch and image size (a kernel already compiled), else the first
    bucket that matches its GEMM view."""
    return tables.select(tab.families[family], tab.layers.get(family, {}), problem, lambda: gemm_view(problem))
