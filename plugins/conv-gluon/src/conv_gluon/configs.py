"""Kernel configurations and architecture limits as data: ``data/configs.json`` read, checked and queried.

Nothing is autotuned at run time: :func:`select` picks a configuration from the problem alone, the same one
every time, from the table measured (or, while ``measured`` is false, reasoned) for the architecture.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources

from conv_core.problem import ConvProblem

#: Kernel families with tables: one per candidate kernel (their producers leave the consumer different
#: register budgets, so their largest tiles differ).
FAMILIES = ("fwd_gather", "fwd_box")

#: Conditions a bucket may have.
CONDITIONS = ("max_m", "max_n", "max_red", "dtypes")

#: Input dtypes the kernels take.
DTYPES = ("float16", "bfloat16")

#: Ways the forward producer brings the input tile (``kernels/fwd.py``), each with a producer budget.
A_MODES = ("cp_async", "registers", "tma_box")


@dataclass(frozen=True)
class TileConfig:
    """One configuration of the forward kernel."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    group_m: int
    num_warps: int

    KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "num_warps")

    @classmethod
    def from_dict(cls, raw: dict) -> TileConfig:
        if set(raw) != set(cls.KEYS):
            raise ValueError(f"configuration {raw} must have exactly the keys {sorted(cls.KEYS)}")
        config = cls(*(raw[k] for k in cls.KEYS))
        config.check()
        return config

    def check(self) -> None:
        """The shapes the kernel can take (raises ``ValueError`` naming the offending field)."""
        def need(ok: bool, why: str) -> None:
            if not ok:
                raise ValueError(f"configuration {self.name}: {why}")

        need(self.num_warps in (4, 8), "num_warps must be 4 (one consumer warpgroup) or 8 (two)")
        groups = self.num_warps // 4
        need(self.block_m in (64, 128, 256), "BLOCK_M must be 64, 128 or 256 (wgmma rows: 64 per instruction)")
        need(self.block_m >= 128, "BLOCK_M must be at least 128: the single-element gather gives each of the "
                                  "4 producer warps' 128 threads a row")
        need(self.block_n % (8 * groups) == 0 and 8 <= self.block_n // groups <= 256,
             "BLOCK_N / warpgroups must be a multiple of 8 in 8..256 (wgmma N)")
        need(self.block_k in (16, 32, 64), "BLOCK_K must be 16, 32 or 64 (16-bit rows of at most 128 bytes: "
                                           "one swizzle line, the widest TMA box row)")
        need(self.stages >= 2, "STAGES must be at least 2")
        need(self.group_m >= 1, "GROUP_M must be at least 1")
        need(self.block_m * self.block_n // (32 * self.num_warps) <= 128,
             "the float32 accumulator must stay within 128 registers per consumer thread")

    @property
    def name(self) -> str:
        """Stable short name, part of the kernel id: ``m128n256k64s4w8g8``."""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}s{self.stages}w{self.num_warps}"
                f"g{self.group_m}")


@dataclass(frozen=True)
class Bucket:
    when: dict
    config: TileConfig

    def matches(self, view: dict[str, int], dtype: str) -> bool:
        w = self.when
        return ((w.get("max_m") is None or view["m"] <= w["max_m"])
                and (w.get("max_n") is None or view["n"] <= w["max_n"])
                and (w.get("max_red") is None or view["red"] <= w["max_red"])
                and (w.get("dtypes") is None or dtype in w["dtypes"]))


@dataclass(frozen=True)
class Producer:
    """The producer partition's warps and registers per thread for one way of bringing the input."""

    warps: int
    regs: int


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

    def box_widths_for(self, block_n: int) -> tuple[int, ...]:
        """The box widths a tile of ``block_n`` output channels may take."""
        min_n, widths = self.box_widths_wide
        return widths if block_n >= min_n else self.box_widths

    def configs(self, family: str) -> tuple[TileConfig, ...]:
        """Every configuration of ``family``, each once, in table order."""
        return tuple(dict.fromkeys(b.config for b in self.families[family]))


@functools.cache
def _raw() -> dict:
    return json.loads(resources.files("conv_gluon").joinpath("data/configs.json").read_text())


def table_names() -> tuple[str, ...]:
    return tuple(_raw()["archs"])


@functools.cache
def table(name: str) -> ArchTable:
    """The table of architecture ``name``, checked."""
    entry = _raw()["archs"][name]
    families = {}
    for family in FAMILIES:
        buckets = []
        for raw in entry["families"][family]:
            unknown = set(raw.get("when", {})) - set(CONDITIONS)
            if unknown:
                raise ValueError(f"configs.json {name}.{family}: unknown conditions {sorted(unknown)}")
            buckets.append(Bucket(raw.get("when", {}), TileConfig.from_dict(raw["config"])))
        if not buckets or buckets[-1].when:
            raise ValueError(f"configs.json {name}.{family}: the last bucket must have no condition")
        families[family] = tuple(buckets)
    producers = {mode: Producer(**entry["producers"][mode]) for mode in A_MODES}
    widths = tuple(entry["box_widths"])
    wide = entry.get("box_widths_wide", {"min_block_n": 1 << 30, "widths": widths})
    wide = (int(wide["min_block_n"]), tuple(wide["widths"]))
    if any(w % 8 for w in widths + wide[1]):
        raise ValueError(f"configs.json {name}: box widths {widths}, {wide[1]} must be multiples of 8")
    regs = entry["registers"]
    return ArchTable(name, bool(entry["measured"]), int(entry["num_sms"]), int(regs["per_sm"]),
                     int(regs["max_per_thread"]), producers, widths, wide, families, entry["efficiency"])


def table_for(arch: str) -> ArchTable | None:
    """The table of ``arch`` (``sm_90a`` reads ``sm_90``'s), or None if the plugin has none."""
    name = arch[:-1] if arch.endswith("a") else arch
    return table(name) if name in _raw()["archs"] else None


def gemm_view(problem: ConvProblem) -> dict[str, int]:
    """What the buckets are chosen on, per group: ``m`` output pixels, ``n`` output channels, ``red`` input
    channels (the reduction per tap) of the forward launch; for the data gradient, of one stride phase's
    launch (``dx`` pixels per phase, the input channels as output, the output channels reduced)."""
    g = problem.groups
    if problem.direction == "bwd_data":
        return {"m": problem.batch * math.prod(problem.input_size) // math.prod(problem.stride),
                "n": problem.in_channels // g, "red": problem.out_channels // g}
    return {"m": problem.batch * math.prod(problem.output_size), "n": problem.out_channels // g,
            "red": problem.in_channels // g}


def select(tab: ArchTable, family: str, problem: ConvProblem) -> TileConfig:
    """The configuration for ``problem``: the first bucket that matches."""
    view = gemm_view(problem)
    for bucket in tab.families[family]:
        if bucket.matches(view, problem.dtype):
            return bucket.config
    raise AssertionError("unreachable: the last bucket matches everything")
