"""Where a converted model's first forward spends its time in benchmark mode (``cudnn.benchmark = True``).

    python3 scripts/gpu_first_use_profile.py --out DIR [--model retinanet] [--batch 4]

Run it on an empty Triton cache and first-use store (``TRITON_CACHE_DIR`` and ``CONV_CORE_FIRST_USE_DIR`` set to
new folders) to see a fresh machine's cost. One process: plain PyTorch's first forward (CUDA, cuDNN and its
algorithm search: what the converted model does not pay again), then the converted model's first forward under
``cProfile``, with conv-core's first-use steps timed by wrapping them: ranking each problem
(``Engine._rank``), timing candidates (``Engine._benchmark``), their first runs side by side (compiles: the
engine's ``first_runs_together``), and asking the backends for candidates (``Registry.candidates``). Per
problem: how many candidates were timed and how long that took.

Written: ``DIR/first_use_profile.txt`` (the summary, then the profile's top functions by cumulative and by own
time) and ``DIR/first_use_profile.json`` (the summary).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from collections import defaultdict
from pathlib import Path

import torch

from conv_tools import bench_models
from conv_tools.model_bench import ModelBenchConfig, cast_input, cudnn_benchmark, make_variants


def timed_calls(owner, name: str, spent: dict, key=None):
    """Wrap ``owner.name`` so that each call's wall time adds to ``spent[name]`` (and, by ``key(args)``, to
    ``spent[name, key]``); returns a function that restores it."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            took = time.perf_counter() - started
            spent[name] += took
            spent[name, "calls"] += 1
            if key is not None:
                spent[name, key(args)] += took

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, original)


def first_forward(model, x) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="retinanet")
    parser.add_argument("--batch", type=int)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = bench_models.get(args.model)
    config = ModelBenchConfig(model=args.model, batch=args.batch or spec.default_batch)
    device = torch.device("cuda")
    base = bench_models.build(args.model).eval()
    x = cast_input(spec.example(config.batch, device), torch.bfloat16, config.layout)
    builders = make_variants(base, "eager", config)
    summary = {"model": args.model, "batch": config.batch, "gpu": torch.cuda.get_device_name(),
               "env": {k: v for k, v in os.environ.items() if k.startswith(("CONV_CORE_", "TRITON_CACHE"))}}
    with cudnn_benchmark():
        plain = builders["plain"]().to(device)
        summary["plain_first_s"] = first_forward(plain, x)
        summary["plain_second_s"] = first_forward(plain, x)
        started = time.perf_counter()
        import conv_core
        from conv_core import engine, plugins

        conv = builders["conv"]().to(device)
        summary["import_and_convert_s"] = time.perf_counter() - started
        spent: dict = defaultdict(float)
        restore = [timed_calls(engine.Engine, "_rank", spent, key=lambda a: a[1].key),
                   timed_calls(engine.Engine, "_benchmark", spent, key=lambda a: (a[1].key, len(a[3]))),
                   timed_calls(engine, "first_runs_together", spent, key=lambda a: len(a[0])),
                   timed_calls(plugins.Registry, "candidates", spent)]
        profiler = cProfile.Profile()
        profiler.enable()
        summary["conv_first_s"] = first_forward(conv, x)
        profiler.disable()
        summary["conv_second_s"] = first_forward(conv, x)
        for undo in restore:
            undo()
    summary["conv_core"] = conv_core.__version__
    summary["spent_s"] = {name: round(spent[name], 3) for name in ("_rank", "_benchmark", "first_runs_together",
                                                                    "candidates")}
    summary["calls"] = {name: spent[name, "calls"] for name in ("_rank", "_benchmark", "first_runs_together",
                                                                "candidates")}
    summary["benchmarked"] = sorted(([key[1][0], key[1][1], round(took, 3)] for key, took in spent.items()
                                     if isinstance(key, tuple) and key[0] == "_benchmark"
                                     and isinstance(key[1], tuple)), key=lambda row: -row[2])
    summary["first_runs_by_count"] = {str(key[1]): round(took, 3) for key, took in spent.items()
                                      if isinstance(key, tuple) and key[0] == "first_runs_together"
                                      and key[1] != "calls"}
    text = io.StringIO()
    text.write(json.dumps(summary, indent=1) + "\n")
    for order in ("cumulative", "tottime"):
        text.write(f"\n==== profile of the converted model's first forward, by {order}\n")
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(45)
    (out / "first_use_profile.txt").write_text(text.getvalue())
    (out / "first_use_profile.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: summary[k] for k in ("gpu", "plain_first_s", "import_and_convert_s", "conv_first_s",
                                              "conv_second_s", "spent_s", "calls")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
