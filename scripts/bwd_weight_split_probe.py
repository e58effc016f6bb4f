"""Times the direct weight-gradient kernels over a range of forced split counts, to see where the split rule
(``configs.json``'s ``split``) leaves time on the table and how much of each run is the second-stage reduction.

For every ResNet-50 (batch 32) and SD-VAE decoder (batch 1) weight-gradient layer in both layouts, the layout's
direct kernel (``bwd_weight_split`` for NHWC, ``bwd_weight_cf`` for NCHW) runs with each configuration of the
family's sweep space and each split count in :data:`SPLITS` (as far as the layer's pixel blocks allow), timed as
the benchmark times (``conv_core.timing.median_us``), next to aten. For the fastest pair and for the pair the
shipped rule gives, the CUDA profiler then splits the time into the partial kernel's and the reduction's.
Naming layouts (``nhwc``, ``nchw``) after the output file probes those only.

Usage (device machine): python3 scripts/bwd_weight_split_probe.py OUT.json [LAYOUT...]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import sys
import tempfile

import torch
from conv_core import timing
from conv_core.arch import device_arch
from conv_core.engine import get_engine
from conv_core.reference import random_operands
from conv_core.suites import suite_problems
from conv_rdna import candidates, configs, plan, sweep

SUITES = (("resnet50", 32), ("sd_vae_decoder", 1))
KERNELS = {"channels_last": "bwd_weight_split", "channels_first": "bwd_weight_cf"}
LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
REPS = 15


def forced(tab: configs.ArchTable, split: int) -> configs.ArchTable:
    """``tab`` with a split rule that gives exactly ``split`` ranges where the layer has that many blocks."""
    return dataclasses.replace(tab, split=configs.SplitRule(10**9, split, 1))


def kernel_times(fn, device: torch.device) -> dict[str, float]:
    """Median per call of each kernel's duration in ``fn``, in us (CUDA profiler, flush before each call)."""
    flush = torch.empty(64 << 20, dtype=torch.int32, device=device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            flush.zero_()
            fn()
        torch.cuda.synchronize(device)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    each: dict[str, list[float]] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and not e["name"].startswith(("at::", "void at::")):
            each.setdefault(e["name"], []).append(e["dur"])
    return {name: statistics.median(d) for name, d in each.items()}


def probe_layer(name: str, problem, device: torch.device) -> dict:
    tab = configs.table_for(problem.arch, interpreted=False)
    kernel = KERNELS[problem.layout]
    family = plan.KERNELS[kernel]
    operands = random_operands(problem, device)
    engine_candidates, _ = get_engine().registry.candidates(problem, device)
    aten = next(c for c in engine_candidates if c.backend == "aten")
    expected = aten.run(*operands).float()
    row = {"layer": name, "key": problem.key, "aten_us": timing.median_us(lambda: aten.run(*operands), device,
                                                                             reps=REPS), "times": {}}
    shipped = configs.select(tab, family, problem)
    shipped_split = plan.make_plan(problem, kernel, shipped, tab).split
    row["shipped"] = f"{shipped.name}x{shipped_split}"
    configs_to_try = dict.fromkeys([shipped, *sweep.space_configs(tab.name, family)])
    for config in configs_to_try:
        seen = set()
        for split in SPLITS:
            p = plan.make_plan(problem, kernel, config, forced(tab, split))
            if p.split in seen:
                continue
            seen.add(p.split)
            cand = candidates.candidate(problem, kernel, config, forced(tab, split), device)
            got = cand.run(*operands).float()
            err = ((got - expected).abs().max() / expected.abs().max()).item()
            us = timing.median_us(functools.partial(cand.run, *operands), device, reps=REPS)
            row["times"][f"{config.name}x{p.split}"] = us
            if err > 2e-2:
                row.setdefault("suspect", {})[f"{config.name}x{p.split}"] = err
    best = min(row["times"], key=row["times"].get)
    row["best"] = best
    for label in {best, row["shipped"]}:
        config_name, split = label.rsplit("x", 1)
        config = next(c for c in configs_to_try if c.name == config_name)
        cand = candidates.candidate(problem, kernel, config, forced(tab, int(split)), device)
        row.setdefault("kernels", {})[label] = kernel_times(functools.partial(cand.run, *operands), device)
    return row


def main() -> None:
    out, layouts = sys.argv[1], [LAYOUTS[name] for name in sys.argv[2:]] or list(KERNELS)
    device = torch.device("cuda")
    rows = []
    for suite, batch in SUITES:
        for layout in layouts:
            for name, problem in suite_problems(suite, batch=batch, layout=layout, direction="bwd_weight",
                                                arch=device_arch(device)):
                if problem.in_channels <= 8 or problem.out_channels <= 8:
                    continue
                row = probe_layer(name, problem, device)
                row["suite"] = suite
                rows.append(row)
                shipped_us = row["times"].get(row["shipped"], float("nan"))
                print(f"{suite} {layout} {name}: aten {row['aten_us']:.1f}  shipped {row['shipped']} "
                      f"{shipped_us:.1f}  best {row['best']} {row['times'][row['best']]:.1f}  "
                      f"kernels {row['kernels']}", flush=True)
                json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
