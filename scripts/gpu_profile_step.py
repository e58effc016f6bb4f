"""Where a converted model's training step spends its time, against the plain model's (a diagnostic).

Usage (GPU machine, repository root, packages installed)::

    python3 scripts/gpu_profile_step.py OUT.txt [--model resnet50 --batch 32 --amp]

Runs a few AMP (or bf16) training steps of the plain and the converted model under ``torch.profiler`` with
``cudnn.benchmark = True`` and writes, for each, the wall time per step and the top operators by CUDA and by
CPU time; then the converted model's picks (kernel per problem and direction, with its time source).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

import conv_core
from conv_core.frontend.call_cache import calls
from conv_tools import bench_models


def _step(model, x, amp: bool):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(x).float().mean()
    loss.backward()
    for p in model.parameters():
        p.grad = None


def _profile(name, model, x, amp, out):
    for _ in range(5):
        _step(model, x, amp)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        _step(model, x, amp)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / 10 * 1e3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            _step(model, x, amp)
        torch.cuda.synchronize()
    table = prof.key_averages()
    out.write(f"==== {name}: {ms:.2f} ms per step\n")
    out.write(table.table(sort_by="cuda_time_total", row_limit=25) + "\n")
    out.write(table.table(sort_by="self_cpu_time_total", row_limit=15) + "\n")
    return ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = bench_models.build(args.model)
    example = bench_models.get(args.model).example(args.batch, "cpu")
    dtype = torch.float32 if args.amp else torch.bfloat16
    plain = model.to("cuda", dtype).to(memory_format=torch.channels_last).train()
    converted = conv_core.convert(copy.deepcopy(plain))
    x = example.to("cuda", dtype).to(memory_format=torch.channels_last)
    with open(args.out, "w") as out:
        plain_ms = _profile("plain", plain, x, args.amp, out)
        conv_ms = _profile("converted", converted, x, args.amp, out)
        out.write(f"plain {plain_ms:.2f} ms, converted {conv_ms:.2f} ms, ratio {plain_ms / conv_ms:.3f}\n")
        for route in calls().routes():
            if hasattr(route, "ranking"):
                rankings = {"fwd": route.ranking, **getattr(route, "backward", {})}
                picks = ", ".join(f"{d}: {r.best.kernel_id} ({r.best.us:.1f} us, {r.best.source})"
                                  for d, r in rankings.items())
                out.write(f"{route.problem.key}: direct={route.direct}; {picks}\n")
    print(open(args.out).read()[-6000:])


if __name__ == "__main__":
    main()
