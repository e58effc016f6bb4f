"""The real-model benchmark under DistributedDataParallel and FSDP2: one AMP training step on every GPU present.

Run by ``torch.distributed.run``, one process per GPU::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    python3 -m torch.distributed.run --nproc_per_node 2 -m conv_tools.model_bench_ddp --json ddp.json

Each process builds the model from the same seed and, for each wrapper of ``--wrap`` (default ``ddp,fsdp``)
in turn, makes a plain and a converted copy (float32 weights), wraps both and times one step (forward under
``torch.autocast`` to bf16, backward with the wrapper's gradient reduction, SGD step) for both in turn, in
alternating rounds (:func:`conv_tools.model_bench.time_interleaved`), on its own random batch in the chosen
layout. The wrappers:

- ``ddp``: ``DistributedDataParallel`` (gradients all-reduced; weights in the chosen layout).
- ``fsdp``: FSDP2, ``fully_shard`` (``torch.distributed.fsdp``, or ``torch.distributed._composable.fsdp`` in
  older torch) on each top-level child module that holds parameters, then on the root; every parameter is a
  ``DTensor`` sharded over the ranks, all-gathered for the forward and backward, its gradient
  reduce-scattered. FSDP2 shards only contiguous parameters, so the weights are in the default memory format
  (the batch still in the chosen layout). Torch without ``fully_shard`` skips it, saying why in the record.

Rank 0 writes the record. Per wrapper, under ``wrappers``: the step-time ratio ``plain / conv`` (the median
over rounds of each round's ratio of the slowest rank's medians, which is what a synchronous job waits for,
with the lowest and highest round's ratio), and whether each model's parameters are bitwise equal on every
rank after the timed steps (DDP's promise; FSDP2's full parameters, gathered from the shards on every rank; a
kernel that is not deterministic across GPUs would break it). The DDP entry's figures are also at the top
level of the record, where records made before FSDP2 had them.
NVLink multicast is switched off (the variables above are set if absent).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from . import bench_models
from .bench_record import finite
from .model_bench import (cast, cast_input, cudnn_benchmark, median_and_spread, round_ratios, round_times,
                          time_interleaved)
from .model_bench_modes import DEFAULT_ROUNDS, training_step

#: Set before NCCL starts, unless already set: multicast can put a shared host's GPUs out of service.
NCCL_SAFETY = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
VARIANTS = ("plain", "conv")
#: The wrappers ``--wrap`` takes, with the name the record gives each (and the short one of the printed lines).
WRAPPERS = {"ddp": "DistributedDataParallel", "fsdp": "FSDP2 fully_shard"}
SHORT = {"ddp": "DDP", "fsdp": "FSDP2"}
#: The figures of a wrapper's entry that the record also holds at its top level for DDP (as before FSDP2).
DDP_TOP_LEVEL = ("ms", "round_ms", "ratio", "ratio_spread", "rank0_samples_ms", "failed",
                 "parameters_equal_across_ranks")


def fully_shard_api() -> Callable | None:
    """FSDP2's ``fully_shard`` (``torch.distributed.fsdp``; ``torch.distributed._composable.fsdp`` in older
    torch), or None where this torch has neither."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            return None
    return fully_shard


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of ``tensor``: a ``DTensor`` (an FSDP2 parameter's shard) gathered from every rank."""
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if full_tensor is not None else tensor


def parameters_equal_across_ranks(model: nn.Module) -> bool:
    """Whether every rank holds bitwise the same parameters as rank 0 (for FSDP2, the full parameters each
    rank gathers from the shards)."""
    with torch.no_grad():
        flat = torch.cat([_full(p.detach()).contiguous().reshape(-1).view(torch.uint8) for p in model.parameters()])
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


def shard(model: nn.Module, device: torch.device, fully_shard: Callable) -> list[str]:
    """``model`` under FSDP2, in place: ``fully_shard`` on each top-level child that holds parameters, then on
    the root (the FSDP2 docs' order). Its parameters are made contiguous first (FSDP2 shards no other).
    Returns the sharded units' names (the root is ``""``)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for p in model.parameters():
        p.data = p.data.contiguous()
    units = [name for name, child in model.named_children() if next(child.parameters(), None) is not None]
    children = dict(model.named_children())
    for name in units:
        fully_shard(children[name], mesh=mesh)
    fully_shard(model, mesh=mesh)
    return [*units, ""]


def _wrapped(wrapper: str, base: nn.Module, device: torch.device) -> tuple[dict[str, nn.Module], dict]:
    """The plain and converted copies of ``base`` under ``wrapper``, and what the record says of the wrapping."""
    import conv_core

    copies = {"plain": copy.deepcopy(base), "conv": conv_core.convert(copy.deepcopy(base))}
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        return {name: DDP(m, device_ids=ids) for name, m in copies.items()}, {}
    fully_shard = fully_shard_api()
    if fully_shard is None:
        raise NotImplementedError(f"this torch ({torch.__version__}) has no FSDP2 fully_shard")
    units = {name: shard(m, device, fully_shard) for name, m in copies.items()}
    return copies, {"sharded_units": units["plain"], "parameter_layout": "contiguous",
                    "note": "FSDP2 shards only contiguous parameters: weights in the default memory format, "
                            "the batch in the chosen layout"}


def time_wrapper(wrapper: str, base: nn.Module, x: torch.Tensor, device: torch.device, amp_dtype: torch.dtype,
                 *, rounds: int, iterations: int, warmup: int) -> dict:
    """One wrapper's entry of the record: its plain and converted steps timed in alternating rounds."""
    entry: dict = {"wrapper": WRAPPERS[wrapper]}
    try:
        models, about = _wrapped(wrapper, base, device)
    except Exception as exc:  # e.g. no FSDP2 in this torch: the other wrapper's figures still count
        entry["skipped"] = f"{type(exc).__name__}: {exc}"[:500]
        return entry
    entry.update(about)
    steps = {name: training_step(m, x, amp_dtype) for name, m in models.items()}
    with cudnn_benchmark():
        samples, failed = time_interleaved(steps, device, warmup=warmup, rounds=rounds, iterations=iterations)
    times = {name: round_times(samples[name]) for name in VARIANTS}
    ms = {name: _slowest([times[name]["ms"]], device)[0] for name in VARIANTS}
    round_ms = {name: _slowest(times[name]["round_ms"], device) for name in VARIANTS}
    ratios = round_ratios(round_ms["plain"], round_ms["conv"])
    ratio, spread = median_and_spread(ratios) if ratios else (None, None)
    equal = {name: parameters_equal_across_ranks(m) for name, m in models.items()}
    entry.update({"ms": ms, "round_ms": round_ms, "ratio": ratio, "ratio_spread": spread,
                  "rank0_samples_ms": samples, "failed": failed, "parameters_equal_across_ranks": equal})
    return entry


def run_ddp_bench(model: str, device: torch.device, *, batch: int | None = None, layout: str = "channels_last",
                  amp_dtype: torch.dtype = torch.bfloat16, rounds: int = DEFAULT_ROUNDS, iterations: int = 4,
                  warmup: int = 5, seed: int = 0, wrappers: Sequence[str] = tuple(WRAPPERS)) -> dict:
    """Plain vs converted training steps under each of ``wrappers`` in turn on this rank (the process group
    must be initialised)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = bench_models.get(model)
    batch = batch or spec.default_batch
    base = cast(bench_models.build(model, seed).to(device), torch.float32, layout).train()
    x = cast_input(spec.example(batch, device, seed=seed + 1 + rank), torch.float32, layout)
    entries = {}
    for wrapper in wrappers:
        entries[wrapper] = time_wrapper(wrapper, base, x, device, amp_dtype, rounds=rounds, iterations=iterations,
                                        warmup=warmup)
    record = {"kind": "ddp", "model": model, "world_size": world, "batch_per_rank": batch, "layout": layout,
              "amp_dtype": str(amp_dtype).removeprefix("torch."), "rounds": rounds, "iterations": iterations,
              "warmup": warmup, "backend": dist.get_backend(), "wrappers": entries}
    record.update({key: entries["ddp"][key] for key in DDP_TOP_LEVEL if key in entries.get("ddp", {})})
    return record


def _wrappers(text: str) -> list[str]:
    names = list(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))
    unknown = [w for w in names if w not in WRAPPERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"wrappers are a comma-separated list of {', '.join(WRAPPERS)}; "
                                         f"got {text!r}")
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m torch.distributed.run --nproc_per_node N "
                                     "-m conv_tools.model_bench_ddp",
                                description="Plain vs converted model, AMP training step under DDP and FSDP2 on "
                                            "every GPU.")
    p.add_argument("--model", default="resnet50", help="a model of conv_tools.bench_models (default resnet50)")
    p.add_argument("--batch", type=int, help="batch per rank (default: the model's)")
    p.add_argument("--layout", default="channels_last", choices=("channels_last", "channels_first"))
    p.add_argument("--wrap", type=_wrappers, default=list(WRAPPERS), metavar="ddp,fsdp",
                   help="the wrappers, timed one after the other, each its own plain/conv pair "
                        "(default ddp,fsdp: DistributedDataParallel, then FSDP2 fully_shard)")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="alternating rounds (default %(default)s)")
    p.add_argument("--iterations", type=int, default=4, help="timed steps per variant in each round (default 4)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", metavar="PATH", help="where rank 0 writes the record")
    return p


def summary(record: dict) -> str:
    """Rank 0's lines on standard output: one per wrapper."""
    lines = []
    for name, e in record["wrappers"].items():
        head = f"{SHORT[name]} x{record['world_size']} {record['model']}"
        if "skipped" in e:
            lines.append(f"{head}: skipped ({e['skipped']})")
            continue
        lines.append(f"{head}: ms per step {e['ms']}, ratio plain/conv {e['ratio']} (rounds {e['ratio_spread']}); "
                     f"parameters equal across ranks: {e['parameters_equal_across_ranks']}; failed: {e['failed']}")
    return "\n".join(lines)


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
                               iterations=args.iterations, warmup=args.warmup, wrappers=args.wrap)
        if dist.get_rank() == 0:
            world = dist.get_world_size()
            safety = " ".join(f"{k}={os.environ[k]}" for k in NCCL_SAFETY)
            prog = f"{safety} python3 -m torch.distributed.run --nproc_per_node {world} -m conv_tools.model_bench_ddp"
            stamp(record, command_line(argv, prog))
            print(summary(record))
            if args.json:
                write(record, args.json)
        dist.barrier()  # no rank tears its group down while another still talks to it (gloo aborted under load)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown: on a loaded CPU a rank's gloo threads were still joinable when
    # C++ destroyed them after the run had finished and written its record ("terminate called without an active
    # exception", SIGABRT, in 4 of 12 two-rank runs on a 2-core machine).
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)
