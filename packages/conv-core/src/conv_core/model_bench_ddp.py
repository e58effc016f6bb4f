"""The real-model benchmark under DistributedDataParallel: one AMP training step on every GPU present.

Run by ``torch.distributed.run``, one process per GPU::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    python3 -m torch.distributed.run --nproc_per_node 2 -m conv_core.model_bench_ddp --json ddp.json

Each process builds the model from the same seed, makes a plain and a converted copy (float32 weights,
the chosen layout), wraps each in DDP and times one step (forward under ``torch.autocast`` to bf16,
backward with DDP's gradient all-reduce, SGD step) for both in turn, in alternating rounds
(:func:`conv_core.model_bench.time_interleaved`), on its own random batch. Rank 0 writes the record: the
step-time ratio ``plain / conv`` (the median over rounds of each round's ratio of the slowest rank's
medians, which is what a synchronous job waits for, with the lowest and highest round's ratio), and
whether each model's parameters are bitwise equal on every rank after the timed steps (DDP's promise; a
kernel that is not deterministic across GPUs would break it).
NVLink multicast is switched off (the variables above are set if absent).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from . import bench_models
from .bench_record import finite
from .model_bench import (cast, cast_input, cudnn_benchmark, median_and_spread, round_ratios, round_times,
                          time_interleaved)
from .model_bench_modes import training_step

#: Set before NCCL starts, unless already set: multicast can put a shared host's GPUs out of service.
NCCL_SAFETY = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
VARIANTS = ("plain", "conv")


def parameters_equal_across_ranks(model: nn.Module) -> bool:
    """Whether every rank holds bitwise the same parameters as rank 0."""
    flat = torch.cat([p.detach().reshape(-1).view(torch.uint8) for p in model.parameters()])
    theirs = flat.clone()
    dist.broadcast(theirs, src=0)
    same = torch.tensor([int(torch.equal(flat, theirs))], device=flat.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item())


def _slowest(values: list[float | None], device: torch.device) -> list[float | None]:
    """The largest of each of ``values`` over the ranks (None where a rank has none): a synchronous step
    waits for the slowest rank."""
    t = torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [finite(v) for v in t.tolist()]


def run_ddp_bench(model: str, device: torch.device, *, batch: int | None = None, layout: str = "channels_last",
                  amp_dtype: torch.dtype = torch.bfloat16, rounds: int = 5, iterations: int = 4, warmup: int = 5,
                  seed: int = 0) -> dict:
    """Plain vs converted DDP training steps on this rank (the process group must be initialised)."""
    import conv_core
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    spec = bench_models.get(model)
    batch = batch or spec.default_batch
    base = cast(bench_models.build(model, seed).to(device), torch.float32, layout).train()
    x = cast_input(spec.example(batch, device, seed=seed + 1 + rank), torch.float32, layout)
    ids = [device.index] if device.type == "cuda" else None
    models = {"plain": DDP(copy.deepcopy(base), device_ids=ids),
              "conv": DDP(conv_core.convert(copy.deepcopy(base)), device_ids=ids)}
    steps = {name: training_step(m, x, amp_dtype) for name, m in models.items()}
    with cudnn_benchmark():
        samples, failed = time_interleaved(steps, device, warmup=warmup, rounds=rounds, iterations=iterations)
    times = {name: round_times(samples[name]) for name in VARIANTS}
    ms = {name: _slowest([times[name]["ms"]], device)[0] for name in VARIANTS}
    round_ms = {name: _slowest(times[name]["round_ms"], device) for name in VARIANTS}
    ratios = round_ratios(round_ms["plain"], round_ms["conv"])
    ratio, spread = median_and_spread(ratios) if ratios else (None, None)
    equal = {name: parameters_equal_across_ranks(m) for name, m in models.items()}
    return {"kind": "ddp", "model": model, "world_size": world, "batch_per_rank": batch, "layout": layout,
            "amp_dtype": str(amp_dtype).removeprefix("torch."), "rounds": rounds, "iterations": iterations,
            "warmup": warmup, "ms": ms, "round_ms": round_ms, "ratio": ratio, "ratio_spread": spread,
            "rank0_samples_ms": samples, "failed": failed, "parameters_equal_across_ranks": equal,
            "backend": dist.get_backend()}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m torch.distributed.run --nproc_per_node N -m conv_core.model_bench_ddp",
                                description="Plain vs converted model, AMP training step under DDP on every GPU.")
    p.add_argument("--model", default="resnet50", help="a model of conv_core.bench_models (default resnet50)")
    p.add_argument("--batch", type=int, help="batch per rank (default: the model's)")
    p.add_argument("--layout", default="channels_last", choices=("channels_last", "channels_first"))
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    p.add_argument("--iterations", type=int, default=4, help="timed steps per variant in each round (default 4)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", metavar="PATH", help="where rank 0 writes the record")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of each rank: set up the process group, run, let rank 0 print and write the record."""
    from .bench_record import command_line, stamp, write

    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    for key, value in NCCL_SAFETY.items():
        os.environ.setdefault(key, value)
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        record = run_ddp_bench(args.model, device, batch=args.batch, layout=args.layout, rounds=args.rounds,
                               iterations=args.iterations, warmup=args.warmup)
        if dist.get_rank() == 0:
            world = dist.get_world_size()
            safety = " ".join(f"{k}={os.environ[k]}" for k in NCCL_SAFETY)
            prog = f"{safety} python3 -m torch.distributed.run --nproc_per_node {world} -m conv_core.model_bench_ddp"
            stamp(record, command_line(argv, prog))
            print(f"DDP x{world} {args.model}: ms per step {record['ms']}, ratio plain/conv {record['ratio']} "
                  f"(rounds {record['ratio_spread']}); "
                  f"parameters equal across ranks: {record['parameters_equal_across_ranks']}; "
                  f"failed: {record['failed']}")
            if args.json:
                write(record, args.json)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
