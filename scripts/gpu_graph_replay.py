"""Do a torchvision model's CUDA graphs, plain and converted, replay without faults when captured by the real-model
benchmark's graph mode (:func:`conv_tools.model_bench_modes.prepare`) and held as a user holds them? A diagnostic,
run on the GPU, one configuration per process (a fault ends the process's CUDA context):

    python3 scripts/gpu_graph_replay.py MODEL BATCH [--benchmark] [--contiguous] [--replays 20] [--variants plain,conv]

Each variant of ``--variants`` (``conv``: ``conv_core.convert``) is captured in turn in this process, then the graphs
are replayed in turn. It showed that the graphs themselves were sound when the benchmark faulted: the benchmark had
let go of what they read (conv_tools.model_bench.run_mode holds the runners now).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torchvision

from conv_tools.model_bench_modes import prepare


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("batch", type=int)
    p.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--contiguous", action="store_true", help="channels-first instead of channels-last")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--variants", default="plain")
    args = p.parse_args()
    torch.backends.cudnn.benchmark = args.benchmark
    fmt = torch.contiguous_format if args.contiguous else torch.channels_last
    base = getattr(torchvision.models, args.model)().cuda().to(torch.bfloat16, memory_format=fmt).eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=fmt)
    runners = {name: prepare("graph", variant(base, name), x, amp_dtype=torch.bfloat16)
               for name in args.variants.split(",")}
    for _ in range(args.replays):
        for runner in runners.values():
            runner.step()
            torch.cuda.synchronize()
    for name, runner in runners.items():
        with torch.no_grad():
            eager = runner.module(x)
        print(f"{vars(args)} {name}: {args.replays} replays ok; replay vs eager max diff "
              f"{(runner.step().float() - eager.float()).abs().max().item():.3g}")


def variant(base: torch.nn.Module, name: str) -> torch.nn.Module:
    model = copy.deepcopy(base)
    if name == "conv":
        import conv_core

        model = conv_core.convert(model)
    return model


if __name__ == "__main__":
    main()
