"""Does a plain torchvision model, captured in a CUDA graph as the real-model benchmark's graph mode captures it,
replay without faults? (A diagnostic, run on the GPU; one configuration per process, since a fault ends the
process's CUDA context.)

    python3 scripts/gpu_graph_replay.py MODEL BATCH [--benchmark] [--replays 20] [--contiguous] [--variants plain,conv]

``--variants``: the model plain and/or converted (``conv_core.convert``), each captured in turn in this process (as
the benchmark does), then replayed in turn.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torchvision


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
    captured = {name: capture(variant(base, name), x) for name in args.variants.split(",")}
    for _ in range(args.replays):
        for graph, _out, _model in captured.values():
            graph.replay()
            torch.cuda.synchronize()
    for name, (_graph, out, model) in captured.items():
        with torch.no_grad():
            eager = model(x)
        print(f"{vars(args)} {name}: {args.replays} replays ok; replay vs eager max diff "
              f"{(out.float() - eager.float()).abs().max().item():.3g}")


def variant(base, name: str):
    model = copy.deepcopy(base)
    if name == "conv":
        import conv_core

        model = conv_core.convert(model)
    return model


def capture(model, x):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(x)
    graph.replay()
    torch.cuda.synchronize()
    return graph, out, model


if __name__ == "__main__":
    main()
