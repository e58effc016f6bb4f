"""Which weight-gradient split rule fits a split probe best (the output of scripts/bwd_weight_split_probe.py).

Every rule of a grid (``target_programs`` x ``max_split`` x ``min_blocks_per_split``) gives each probed layer
a split for the configuration the table selected when it was probed (``configs.split_count``, then
``plan.pixel_ranges`` as the plan rounds it). The layer then costs the probe's time at that split, or at the
probed split nearest to it in ratio. Rules are ranked by the geomean over the layers of that time over the
layer's fastest probed time (any configuration, any split). The shipped rule is printed first.
``bwd_weight_cf`` is fitted on the probe's channels-first layers, the other kernels on its channels-last
ones.

Usage: python3 scripts/split_rule_fit.py PROBE.json [KERNEL] [TOP]    (KERNEL: bwd_weight_cf by default)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys

from conv_core.problem import ConvProblem
from conv_rdna import configs, plan

TARGETS = (132, 264, 396, 528, 792, 1056, 1584)
MAX_SPLITS = (16, 32, 48, 64, 96, 128, 192, 256)
MIN_BLOCKS = (2, 4, 8, 16, 32)


def probed_time(times: dict[str, float], config: str, split: int) -> float:
    """The probe's time for ``config`` at ``split``, or at the probed split nearest to it in ratio."""
    splits = {int(label.rsplit("x", 1)[1]): us for label, us in times.items() if label.rsplit("x", 1)[0] == config}
    nearest = min(splits, key=lambda s: abs(math.log(s / split)))
    return splits[nearest]


def rule_cost(rows: list[dict], kernel: str, tab: configs.ArchTable, rule: configs.SplitRule) -> tuple[float, float]:
    """(geomean, worst) over ``rows`` of the time ``rule`` gives over the fastest probed time."""
    ruled = dataclasses.replace(tab, split=rule)
    ratios = []
    for row in rows:
        problem = ConvProblem.from_key(row["key"])
        config = configs.TileConfig.from_name(row["shipped"].rsplit("x", 1)[0])
        split = plan.make_plan(problem, kernel, config, ruled).split
        ratios.append(probed_time(row["times"], config.name, split) / min(row["times"].values()))
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), max(ratios)


def main(argv: list[str]) -> None:
    kernel = argv[1] if len(argv) > 1 else "bwd_weight_cf"
    rows = [row for row in json.load(open(argv[0]))  # the probe's rows of the kernel's layout
            if (ConvProblem.from_key(row["key"]).layout == "channels_first") == (kernel == "bwd_weight_cf")]
    top = int(argv[2]) if len(argv) > 2 else 10
    tab = configs.table("sm_90")
    geomean, worst = rule_cost(rows, kernel, tab, tab.split)
    print(f"shipped {tab.split}: geomean {geomean:.3f}, worst {worst:.2f} ({len(rows)} layers)")
    costs = []
    for target, max_split, min_blocks in itertools.product(TARGETS, MAX_SPLITS, MIN_BLOCKS):
        rule = configs.SplitRule(target, max_split, min_blocks)
        costs.append((rule_cost(rows, kernel, tab, rule), rule))
    for (geomean, worst), rule in sorted(costs, key=lambda c: c[0])[:top]:
        print(f"{rule}: geomean {geomean:.3f}, worst {worst:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
