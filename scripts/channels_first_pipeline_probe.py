"""Times the channels-first kernels with their reduction loop left to the compiler's pipeliner (asynchronous
copies) against their register prefetch, to decide where ``plan.pipelined_pixels`` should choose the first.

For every NCHW layer of the ResNet-50 (batch 32) and SD-VAE decoder (batch 1) suites, in each direction,
the direction's channels-first kernel (``implicit_gemm_cf``, ``bwd_data_cf``, ``bwd_weight_cf``) runs with
the table's configuration under both loops, and with every configuration of the family's sweep space (and
:data:`EXTRA`) under the pipelined one; the weight gradient also with twice the table's splits. Each run is timed as the
benchmark times (``conv_core.timing.median_us``) next to aten, and its error against aten's result is
recorded. Layers where the two loops give the same plan (``pipelined_pixels`` false either way) are left out.

Usage (device machine): python3 scripts/channels_first_pipeline_probe.py OUT.json
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

import torch
from conv_core import timing
from conv_core.arch import device_arch
from conv_core.engine import get_engine
from conv_core.reference import random_operands
from conv_core.suites import suite_problems
from conv_rdna import candidates, configs, plan, sweep

SUITES = (("resnet50", 32), ("sd_vae_decoder", 1))
REPS = 20
#: Deeper pipelines than the sweep space holds (its channels-first entries were chosen for the prefetch loop);
#: ptxas keeps them within the register file on the suites' layers.
EXTRA = {"implicit_gemm_cf": (configs.TileConfig(128, 128, 64, 8, 8, 3), configs.TileConfig(64, 128, 64, 8, 4, 3)),
         "bwd_weight_cf": (configs.TileConfig(64, 64, 64, 8, 4, 4), configs.TileConfig(128, 128, 64, 8, 8, 4))}


def pipelined(launches) -> bool:
    return any(dict(launch.constexprs).get("PIPELINED") for launch in launches)


def variants(problem, kernel: str, tab: configs.ArchTable) -> dict[str, tuple]:
    """Label -> (configuration, table) of every run to time; empty where the pipeliner never applies."""
    family = plan.KERNELS[kernel]
    shipped = configs.select(tab, family, problem)
    on = dataclasses.replace(tab, channels_first_async_copies=True)
    off = dataclasses.replace(tab, channels_first_async_copies=False)
    if not pipelined(plan.make_plan(problem, kernel, shipped, on).launches):
        return {}
    runs = {f"prefetch {shipped.name}": (shipped, off)}
    for config in dict.fromkeys([shipped, *sweep.space_configs(tab.name, family), *EXTRA.get(family, ())]):
        runs[f"pipelined {config.name}"] = (config, on)
    if family == "bwd_weight_cf":
        rule = on.split
        wider = dataclasses.replace(on, split=dataclasses.replace(rule, target_programs=2 * rule.target_programs,
                                                                  max_split=2 * rule.max_split))
        runs[f"pipelined {shipped.name} 2x splits"] = (shipped, wider)
    return runs


def probe_layer(name: str, problem, kernel: str, device: torch.device) -> dict | None:
    tab = configs.table_for(problem.arch, interpreted=False)
    runs = variants(problem, kernel, tab)
    if not runs:
        return None
    operands = random_operands(problem, device)
    engine_candidates, _ = get_engine().registry.candidates(problem, device)
    aten = next(c for c in engine_candidates if c.backend == "aten")
    expected = aten.run(*operands).float()
    aten_us = timing.median_us(functools.partial(aten.run, *operands), device, reps=REPS)
    row = {"layer": name, "key": problem.key, "kernel": kernel, "aten_us": aten_us, "us": {}, "error": {}}
    for label, (config, tab_) in runs.items():
        cand = candidates.candidate(problem, kernel, config, tab_, device)
        got = cand.run(*operands).float()
        row["error"][label] = ((got - expected).abs().max() / expected.abs().max()).item()
        row["us"][label] = timing.median_us(functools.partial(cand.run, *operands), device, reps=REPS)
    return row


def main() -> None:
    out = sys.argv[1]
    device = torch.device("cuda")
    rows = []
    for suite, batch in SUITES:
        for direction, kernel in plan.CHANNELS_FIRST_KERNELS.items():
            for name, problem in suite_problems(suite, batch=batch, layout="channels_first", direction=direction,
                                                arch=device_arch(device)):
                if kernel not in candidates.kernels_for(problem):
                    continue
                row = probe_layer(name, problem, kernel, device)
                if row is None:
                    continue
                rows.append(row)
                times = "  ".join(f"{label} {us:.1f}" for label, us in row["us"].items())
                worst = max(row["error"].values())
                print(f"{suite} {direction} {name}: aten {row['aten_us']:.1f}  {times}  max err {worst:.1e}",
                      flush=True)
                json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
