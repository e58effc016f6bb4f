"""Times Winograd candidates again and again in one process, to find why their benchmark times jump between runs.

The rdna-6 benchmark page reports the same layer and configuration at 35 us in one run and 83 us in the
next (200 vs 548 us, 45 vs 635 us elsewhere) while the direct kernels repeat within a few percent; run 10
showed the jumps inside one process with no cache miss and no new allocation, and slower times without the
L2 flush than with it. Each round here takes, for the Winograd candidate:

- ``events``: the benchmark's number (``conv_core.timing.median_us``: flush, spin kernel, events);
- ``long lead``: the same with a spin kernel ten times longer in front of each repetition;
- ``kernels`` and ``span``: from the CUDA profiler over the same loop, the median over repetitions of the
  sum of the candidate's kernel durations, and of the time from its first kernel's start to its last's end
  (gaps between its kernels included);
- ``host``: the median host time of one ``run`` call (no synchronization inside the timed call).

If ``events`` moves while ``kernels`` holds, the GPU waits between Winograd's kernels and what moves is the
launch, not the kernels; if ``kernels`` moves too, it is the kernels themselves.

After the rounds, the host time of the direct candidate of each layer, and where the last layer's Winograd
``run`` spends its host time (cProfile, top functions by own time).

Usage (device machine): python3 scripts/winograd_timing_probe.py [ROUNDS]
"""

from __future__ import annotations

import cProfile
import functools
import json
import pstats
import statistics
import sys
import tempfile
import time

import torch
from conv_core import timing
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_rdna import candidates, winograd

LAYERS = {  # the layers whose times jumped, bf16, channels-first
    "sd_vae 512->512 64x64 fwd": ConvProblem("fwd", 1, 512, 512, (64, 64), 3, 1, 1, 1),
    "sd_vae 256->256 256x256 fwd": ConvProblem("fwd", 1, 256, 256, (256, 256), 3, 1, 1, 1),
    "resnet50 layer4 512->512 7x7 bwd_data": ConvProblem("bwd_data", 32, 512, 512, (7, 7), 3, 1, 1, 1),
}
REPS = 30


def profiled(fn, device: torch.device) -> tuple[float, float, dict[str, float]]:
    """Median per repetition of (sum of Winograd's kernel durations, first start to last end, each kernel's
    duration) of ``fn``, in us, timed in the benchmark's loop (flush and spin kernel before each repetition)."""
    flush = torch.empty(64 << 20, dtype=torch.int32, device=device)
    marks = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            flush.zero_()
            torch.cuda._sleep(timing.LEAD_CYCLES)
            marks.append(torch.cuda.Event(enable_timing=True))
            marks[-1].record()
            fn()
        torch.cuda.synchronize(device)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in trace["traceEvents"] if e.get("cat") == "kernel")
    reps, current, each = [], None, {}
    for ts, dur, name in kernels:
        if not name.startswith("winograd"):
            current = None
            continue
        if current is None:
            current = [ts, ts + dur, 0.0]
            reps.append(current)
        current[1] = ts + dur
        current[2] += dur
        each.setdefault(name, []).append(dur)
    return (statistics.median(r[2] for r in reps), statistics.median(r[1] - r[0] for r in reps),
            {name: statistics.median(d) for name, d in each.items()})


def host_us(fn, device: torch.device) -> float:
    samples = []
    for i in range(REPS):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
        if i % 8 == 7:
            torch.cuda.synchronize(device)
    torch.cuda.synchronize(device)
    return statistics.median(samples)


def main(rounds: int) -> None:
    device = torch.device("cuda")
    lead = timing.LEAD_CYCLES
    for name, base in LAYERS.items():
        problem = base.replace(dtype="bfloat16", weight_dtype="bfloat16", out_dtype="bfloat16",
                               layout="channels_first", arch="sm_90")
        offered = {c.kernel: c for c in candidates.candidates(problem, device) if isinstance(c, Candidate)}
        operands = random_operands(problem, device, 0)
        fn = functools.partial(offered[winograd.KERNEL].run, *operands)
        for i in range(rounds):
            events = timing.median_us(fn, device, reps=REPS)
            timing.LEAD_CYCLES = 10 * lead
            long_lead = timing.median_us(fn, device, reps=REPS)
            timing.LEAD_CYCLES = lead
            kernels, span, each = profiled(fn, device)
            print(f"{name} round {i}: events {events:7.1f} us, long lead {long_lead:7.1f}, kernels {kernels:7.1f}, "
                  f"span {span:7.1f}, host {host_us(fn, device):6.1f}; "
                  + ", ".join(f"{k.removeprefix('winograd_')} {v:.1f}" for k, v in each.items()), flush=True)
        for c in offered.values():
            direct = functools.partial(c.run, *operands)
            direct()
            print(f"{name}: host {host_us(direct, device):6.1f} us for {c.kernel_id}", flush=True)
    profile = cProfile.Profile()
    profile.runcall(lambda: [fn() for _ in range(100)])
    torch.cuda.synchronize(device)
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
