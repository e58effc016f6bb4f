"""The CDNA tables, derived from the chip model: ``python -m conv_cdna.derive [--write | --check]``.

For each architecture and tiled family, each bucket (:data:`BUCKETS`: bounds on the family's GEMM view, as conv-rdna's
tables have them) takes the tile of :data:`MENU` (Composable Kernel's bf16 menu of 256-thread workgroups, plus
512-thread ones for the largest tiles and narrow tiles for few channels) that the model (:mod:`conv_cdna.model`)
finds least slow over the layers of conv-core's suites falling in it: the smallest mean ratio to the best tile of
each layer, every layout and direction of the family. A tile the chip cannot hold (LDS, 512 registers a lane) or
whose ``BLOCK_K`` is below its matrix instruction's is never a choice, nor one the compile checks found too big for
the chip (``data/rejected.json``, written by ``python -m conv_cdna.aot --record``). Consecutive buckets with one tile
merge. The grouped families also choose among tiles as narrow as their groups (:data:`GROUPED_MENU`), and their last
bucket takes a tile that holds the widest group they are offered (:func:`holds_every_group`).

The rest follows rules, written here once: the stencil (depthwise) tiles are conv-rdna's H100 ones with the same
threads (half the warps: 64 lanes a wave); the split rules aim at two workgroups per CU (four for the stencils and
Winograd's 36 GEMMs); the small kernels around the GEMMs take conv-rdna's H100 blocks at the same threads.
"""

from __future__ import annotations

import argparse
import json
import sys
from statistics import fmean

from conv_tools.suites import available_suites, suite_problems
from conv_core.kit.tables import Bucket
from conv_rdna.api import (DEPTHWISE_FAMILIES, FEW_COUT_MIN_BLOCK_N, GROUPED_MAX_CHANNELS, REGISTRY, TileConfig,
                           build_table, config_dict, few_cout_plan, gemm_view, rdna_table)

from . import model
from .aot import rejected
from .candidates import plan
from .chips import DATA, chip
from .configs import TARGETS

#: (BLOCK_M, BLOCK_N, BLOCK_K, waves, stages): every tile a bucket may take (8 waves on small tiles: the gathers of
#: the few-channel weight gradients hold many addresses, and spill with 4).
MENU = (
    (256, 256, 64, 8, 3), (256, 128, 64, 8, 2), (128, 256, 64, 8, 2),
    (128, 128, 64, 4, 2), (128, 128, 32, 4, 2), (128, 64, 64, 4, 2), (64, 128, 64, 4, 2), (64, 64, 64, 4, 2),
    (128, 32, 64, 4, 2), (64, 32, 64, 4, 2), (256, 32, 32, 4, 2), (128, 16, 64, 4, 2), (256, 16, 32, 4, 2),
    (128, 64, 32, 4, 2), (64, 64, 32, 4, 2), (128, 64, 64, 8, 2), (64, 64, 64, 8, 2), (64, 32, 64, 8, 2),
)
#: Narrow tiles offered to the grouped families only (a tile holds whole groups of 2 to 64 channels: 16 to 64 columns
#: and reduction lanes; the weight gradient's 16 to 64 output x input channels over 64 or 128 pixels a step), so that
#: the other families' choices stay the menu's.
GROUPED_MENU = {
    "grouped": ((128, 16, 16, 4, 2), (256, 16, 16, 4, 2), (128, 16, 32, 4, 2), (128, 32, 32, 4, 2),
                (64, 32, 32, 4, 2)),
    "grouped_bwd_weight": ((16, 16, 128, 4, 2), (16, 16, 64, 4, 2), (32, 32, 128, 4, 2), (32, 32, 64, 4, 2)),
}
GROUP_M = 8

#: Each tiled family's buckets before the choice, in order (the last has no condition).
_GEMM = ({"max_red": 16}, {"max_n": 16}, {"max_n": 32}, {"max_n": 64}, {})
_WEIGHT = ({"max_n": 32}, {"max_m": 64}, {})
_FEW = ({"max_n": 16}, {"max_n": 32}, {"max_n": 64}, {})
_GROUPED = ({"max_n": 16, "max_red": 16}, {"max_n": 32, "max_red": 32}, {})  # channels per group, as conv-rdna's
BUCKETS = {
    "implicit_gemm": _GEMM, "conv3x3": _GEMM, "gemm1x1": _GEMM, "bwd_data": _GEMM, "col2im_bwd_data": _GEMM,
    "implicit_gemm_cf": _GEMM, "winograd": _GEMM[3:],
    "bwd_weight": _WEIGHT, "bwd_weight_cf": _WEIGHT, "winograd_bwd_weight": _WEIGHT[1:],
    "few_channels_in_bwd_weight": _WEIGHT, "few_channels_out_bwd_weight": _WEIGHT,
    "few_channels_in": _FEW, "few_channels_out": _FEW, "few_channels_in_bwd_data": _FEW,
    "few_channels_out_bwd_data": _FEW,
    "grouped": _GROUPED, "grouped_bwd_weight": ({"max_m": 16, "max_n": 16}, {"max_m": 32, "max_n": 32}, {}),
}
#: What the compiler rejected (read once: the derivation is one process).
REJECTED = rejected()
#: The table conv-rdna measured its stencil tiles, split reduction and transform blocks on.
RDNA_SOURCE = "sm_90"


def config_of(entry: tuple[int, ...]) -> TileConfig:
    m, n, k, warps, stages = entry
    return TileConfig(m, n, k, GROUP_M, warps, stages)


def fits(arch: str, family: str, config: TileConfig) -> bool:
    """Whether the chip holds a workgroup of ``config``, its matrix instruction takes its ``BLOCK_K``, and the
    compiler did not find it too big for ``family``'s kernels there (``data/rejected.json``)."""
    c = chip(arch)
    return (c.resident_tiles(config, "bfloat16") >= 1 and config.block_k >= c.min_block_k()
            and config.name not in REJECTED.get(arch, {}).get(family, ()))


def layers(arch: str) -> list:
    """Every layer of conv-core's suites on ``arch``, bf16, in both layouts and the three directions."""
    return [problem for suite in available_suites() for layout in ("channels_last", "channels_first")
            for direction in ("fwd", "bwd_data", "bwd_weight")
            for _, problem in suite_problems(suite, layout=layout, direction=direction, arch=arch)]


def family_times(arch: str, family: str, problems: list, tab, menu: list[TileConfig]) -> list[tuple[dict, object]]:
    """``(times by tile, problem)`` of each layer some kernel of ``family`` runs: the model's time of the family's
    applicable kernels together, for every tile of ``menu`` whose plan can be made."""
    kernels = [e for e in REGISTRY if e.family == family]
    found = []
    for problem in problems:
        applicable = [e.name for e in kernels if e.issue(problem) is None]
        if not applicable:
            continue
        times = {}
        for config in menu:
            try:
                times[config] = sum(model.estimate_us(problem, plan(problem, k, config, tab), chip(arch))
                                    for k in applicable)
            except (ValueError, AssertionError):  # a tile the kernel does not take
                continue
        if times:
            found.append((times, problem))
    return found


#: Families run by the few-output-channel kernel, whose tile's columns hold every tap of a filter it takes.
FEW_COUT_FAMILIES = frozenset(e.family for e in REGISTRY if e.plan is few_cout_plan)


def holds_every_filter(family: str, config: TileConfig) -> bool:
    """Whether ``config`` runs every filter ``family`` takes: the few-output-channel kernel puts a filter's taps
    (up to :data:`~conv_rdna.api.FEW_COUT_MIN_BLOCK_N`) in one tile's columns, whatever the bucket
    (the buckets split by the GEMM's sizes, not by taps), and the suites need not have the largest filter."""
    return family not in FEW_COUT_FAMILIES or config.block_n >= FEW_COUT_MIN_BLOCK_N


def holds_every_group(family: str, config: TileConfig) -> bool:
    """Whether ``config`` runs every problem of ``family``: the grouped kernels' last bucket must hold a group of the
    most channels they take (:data:`conv_rdna.api.GROUPED_MAX_CHANNELS`, in and out), which the suites need not
    have."""
    widths = {"grouped": (config.block_n, config.block_k), "grouped_bwd_weight": (config.block_m, config.block_n)}
    return min(widths.get(family, (GROUPED_MAX_CHANNELS,))) >= GROUPED_MAX_CHANNELS


def choose(arch: str, family: str, problems: list, tab) -> list[dict]:
    """The family's buckets on ``arch``: per bucket the tile of least mean ratio to each layer's best."""
    menu = [c for c in map(config_of, MENU + GROUPED_MENU.get(family, ()))
            if fits(arch, family, c) and holds_every_filter(family, c)]
    rows = family_times(arch, family, problems, tab, menu)
    conditions = BUCKETS[family]
    by_bucket: list[list[dict]] = [[] for _ in conditions]
    for times, problem in rows:
        view = gemm_view(problem, family)
        index = next(i for i, when in enumerate(conditions) if Bucket(when, None).matches(view, problem.dtype))
        by_bucket[index].append(times)
    chosen = []
    for when, members in zip(conditions, by_bucket):
        if not members and when:
            continue
        members = members or [times for times, _ in rows]
        shared = [c for c in menu if all(c in times for times in members) and (when or holds_every_group(family, c))]
        best = min(shared, key=lambda c: (fmean(t[c] / min(t.values()) for t in members), MENU_ORDER[c]))
        if chosen and chosen[-1]["config"] == best:
            chosen.pop()
        chosen.append({"when": dict(when), "config": best} if when else {"config": best})
    return [{**({"when": b["when"]} if "when" in b else {}), "config": config_dict(b["config"])} for b in chosen]


MENU_ORDER = {config_of(entry): i for i, entry in enumerate(MENU + sum(GROUPED_MENU.values(), ()))}


def _same_threads(block: dict) -> dict:
    """A block of conv-rdna's H100 table (32-lane warps) with the same threads in 64-lane waves."""
    return {**block, "num_warps": max(block["num_warps"] // 2, 1)}


def rules(arch: str) -> dict:
    """What a table holds besides its tiled families, from the chip's compute units and conv-rdna's H100 blocks."""
    cus = chip(arch).compute_units
    source = rdna_table(RDNA_SOURCE)
    stencils = {family: [{**({"when": dict(b.when)} if b.when else {}), "config": _same_threads(config_dict(b.config))}
                         for b in source.families[family] if "float32" not in b.when.get("dtypes", ())]
                for family in DEPTHWISE_FAMILIES}
    return {
        "stencils": stencils,
        "split": {"target_programs": 2 * cus, "max_split": 64, "min_blocks_per_split": 16},
        "winograd_split": {"target_programs": 4 * cus, "max_split": 32, "min_blocks_per_split": 8},
        "depthwise_split": {"target_programs": 4 * cus, "max_split": 256, "min_blocks_per_split": 16},
        "few_channels_split": {"target_programs": 2 * cus, "max_split": 512, "min_blocks_per_split": 8},
        "reduce": {"BLOCK": source.reduce_block, "num_warps": max(source.reduce_warps // 2, 1)},
        "sum_splits": _same_threads(dict(source.sum_splits.__dict__)),
        "winograd_transforms": _same_threads(dict(source.winograd_transforms)),
    }


def derive_arch(arch: str) -> dict:
    """The ``archs.<arch>`` entry of ``configs.json``."""
    fixed = rules(arch)
    provisional = {"measured": False, "families": {**fixed.pop("stencils")}, "layers": {}, "efficiency": {}, **fixed}
    # Plans read the split rules and reduction blocks from the table: derive with those in place.
    tab = build_table({arch: {**provisional, "families": {
        **provisional["families"], **{f: [{"config": config_dict(config_of(MENU[0]))}] for f in BUCKETS}}}},
        arch, {}, "derivation")
    problems = layers(arch)
    families = {family: choose(arch, family, problems, tab) for family in BUCKETS}
    c = chip(arch)
    notes = (f"Derived by python -m conv_cdna.derive from the chip model (conv_cdna.model; {c.part}: "
             f"{c.compute_units} CUs, {c.lds_bytes // 1024} KiB LDS, {c.registers_per_lane} registers a lane) over "
             "conv-core's suites; never measured on this architecture.")
    return {"measured": False, "notes": notes, **provisional, "families": {**families, **provisional["families"]}}


def derive() -> dict:
    """The whole ``configs.json``."""
    return {"_doc": "conv-cdna's tables in conv-rdna's configs.json format (conv_rdna.configs), one per CDNA "
                    "architecture, written by python -m conv_cdna.derive (do not edit by hand: "
                    "tests/test_tables.py checks the file is what the derivation gives).",
            "archs": {arch: derive_arch(arch) for arch in TARGETS}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_cdna.derive", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write data/configs.json")
    action.add_argument("--check", action="store_true", help="exit 1 if data/configs.json is not what is derived")
    args = parser.parse_args(argv)
    text = json.dumps(derive(), indent=1) + "\n"
    path = DATA.path("configs.json")
    if args.write:
        with open(str(path), "w") as f:
            f.write(text)
    elif args.check:
        return 0 if path.is_file() and path.read_text() == text else 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
