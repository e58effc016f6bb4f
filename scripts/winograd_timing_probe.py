"""Times Winograd candidates again and again in one process, to find why their benchmark times jump between runs.

The rdna-6 benchmark page reports the same layer and configuration at 35 us in one run and 83 us in the
next (200 vs 548 us, 45 vs 635 us elsewhere) while the direct kernels repeat within a few percent. Each
round here times the Winograd candidate as the bench does (``conv_core.timing.median_us``), then without
the L2 flush, then a direct candidate in between (to move the caching allocator's state), and prints the
transformed-weight cache's misses and the allocator's counters for the round, so that a jump shows
whether it comes with a cache miss, a new segment (cudaMalloc) or an allocation retry.

Usage (device machine): python3 scripts/winograd_timing_probe.py [ROUNDS]
"""

from __future__ import annotations

import functools
import sys

import torch
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_core.timing import median_us
from conv_rdna import candidates, winograd

LAYERS = {  # the layers whose times jumped, bf16, channels-first
    "sd_vae 512->512 64x64 fwd": ConvProblem("fwd", 1, 512, 512, (64, 64), 3, 1, 1, 1),
    "sd_vae 256->256 256x256 fwd": ConvProblem("fwd", 1, 256, 256, (256, 256), 3, 1, 1, 1),
    "resnet50 layer4 512->512 7x7 bwd_data": ConvProblem("bwd_data", 32, 512, 512, (7, 7), 3, 1, 1, 1),
}
COUNTERS = ("num_alloc_retries", "segment.all.allocated", "num_device_alloc")


def counters() -> dict[str, int]:
    stats = torch.cuda.memory_stats()
    return {name: stats.get(name, 0) for name in COUNTERS}


def main(rounds: int) -> None:
    device = torch.device("cuda")
    for name, base in LAYERS.items():
        problem = base.replace(dtype="bfloat16", weight_dtype="bfloat16", out_dtype="bfloat16",
                               layout="channels_first", arch="sm_90")
        offered = {c.kernel: c for c in candidates.candidates(problem, device) if isinstance(c, Candidate)}
        wino = offered[winograd.KERNEL]
        direct = offered.get("implicit_gemm_cf") or offered.get("bwd_data_cf")
        operands = random_operands(problem, device, 0)
        for i in range(rounds):
            before, misses = counters(), winograd.WEIGHT_CACHE.misses
            flushed = median_us(functools.partial(wino.run, *operands), device, reps=30)
            unflushed = median_us(functools.partial(wino.run, *operands), device, reps=30, flush_cache=False)
            between = median_us(functools.partial(direct.run, *operands), device, reps=10)
            after = counters()
            moved = {k: after[k] - before[k] for k in COUNTERS}
            print(f"{name} round {i}: {flushed:8.1f} us flushed, {unflushed:8.1f} us not, direct {between:8.1f} us; "
                  f"cache misses +{winograd.WEIGHT_CACHE.misses - misses}, allocator {moved}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
