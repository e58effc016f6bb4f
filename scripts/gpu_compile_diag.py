"""Where a converted model loses under ``torch.compile`` (a diagnostic, run on the GPU).

    python3 scripts/gpu_compile_diag.py [--model resnet50] [--steps 10] [--variants plain,conv,fused,conv_aten]

Each variant (plain, conv, fused) is prepared as the real-model benchmark prepares its ``compile`` mode, then
timed (wall time per step, synchronised at the end and after each step) and profiled over ``--steps`` steps:
the graphs Dynamo made, the process's other threads and launch path (``gpu_eager_gap.process_state``), the Python
functions that take the host time (cProfile), the GPU kernels by total time and the host time per step; also the
garbage collector's passes during the timed steps, the host's operators by own time (the profiler's CPU side: what
cProfile cannot see into) and how the engine's routes receive their operands (each dense in the route's layout or
not). Plain PyTorch runs with ``cudnn.benchmark = True``. ``--profile-sort cumulative --profile-only conv_``
narrows the cProfile view.
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

import conv_core
from conv_core.problem import torch_dtype
from conv_tools import bench_models
from conv_tools.model_bench import ModelBenchConfig, cast_input, cudnn_benchmark, make_variants, weights_dtype
from conv_tools.model_bench_modes import prepare
from gpu_eager_gap import GcTimer, process_state


def profile(runner, steps: int) -> tuple[float, list[tuple[str, int, float]]]:
    """Host ms per step, and the kernels (name, count, total GPU us per step) by total time."""
    for _ in range(3):
        runner.step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            runner.step()
        host = (time.perf_counter() - start) / steps * 1e3
        torch.cuda.synchronize()
    rows = [(e.key, e.count // steps, e.device_time_total / steps) for e in prof.key_averages()
            if e.device_time_total > 0]
    return host, sorted(rows, key=lambda r: -r[2])


def wall(runner, steps: int, sync_each: bool) -> float:
    """Wall ms per step over ``steps`` steps: synchronised once at the end (the benchmark's way) or after each."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        runner.step()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def python_profile(runner, steps: int, sort: str = "tottime", only: str = "") -> None:
    """The Python functions that take a compiled step's host time (cProfile), by own time (or ``sort``), those
    whose file and name match ``only`` where given."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        runner.step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(*([only] if only else []), 18)
    print("\n".join("   | " + line for line in text.getvalue().splitlines()[4:34]), flush=True)


def cpu_ops(runner, steps: int) -> None:
    """The host's operators and runtime calls of a compiled step by own time (the profiler's CPU side): a call
    that blocks (a synchronize, a free, a copy from the host) shows here where cProfile sees only its caller."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            runner.step()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:22]
    for e in rows:
        print(f"   ~ {e.count // steps:5d} x {e.self_cpu_time_total / steps:9.1f} us own  {e.key[:100]}")


def operand_layouts(runner) -> None:
    """How the engine's routes receive their operands in one compiled step: the input and weight dense in the
    route's layout or not, the weight a parameter or a tensor the graph made (a copy costs a derived weight)."""
    from collections import Counter

    from conv_core.frontend import routes
    from conv_core.layout import is_dense_in

    seen, run = Counter(), routes.Route.run

    def recording(self, x, w, bias):
        seen[(f"x dense {is_dense_in(x, self.layout)}", f"w dense {is_dense_in(w, self.layout)}",
              type(w).__name__, self.layout, tuple(w.stride()))] += 1
        return run(self, x, w, bias)

    routes.Route.run = recording
    try:
        runner.step()
        torch.cuda.synchronize()
    finally:
        routes.Route.run = run
    for key, count in seen.most_common(12):
        print(f"   > {count:4d} x {key}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--variants", default="plain,conv,fused", help="in this order; conv_aten: every layer on aten")
    parser.add_argument("--profile-sort", default="tottime", help="cProfile's order: tottime, cumulative, ...")
    parser.add_argument("--profile-only", default="", help="a regular expression: only functions matching it")
    args = parser.parse_args()
    spec = bench_models.get(args.model)
    config = ModelBenchConfig(model=args.model, modes=("compile",))
    base = bench_models.build(args.model).cuda()
    x = spec.example(spec.default_batch, "cuda")
    xin = cast_input(x, weights_dtype("compile", config), config.layout)
    with cudnn_benchmark():
        builders = make_variants(base, "compile", config)
        builders["conv_aten"] = lambda: conv_core.convert(builders["plain"](), backend="aten")
        for name in args.variants.split(","):
            build = builders[name]
            runner = prepare("compile", build(), xin, amp_dtype=torch_dtype(config.amp_dtype))
            with GcTimer() as collector:
                timed = {sync: [wall(runner, 20, sync) for _ in range(5)] for sync in (False, True)}
            print(f"== {args.model} compile {name}: wall ms/step, sync at the end "
                  f"{sorted(timed[False])}, after each step {sorted(timed[True])}; graphs "
                  f"{dict(torch._dynamo.utils.counters['stats'])}; {process_state()}; collector passes (gen 0/1/2) "
                  f"{collector.passes} taking {sum(collector.ns) / 200 / 1e3:.1f} us/step, {len(gc.get_objects())} "
                  "tracked objects", flush=True)
            python_profile(runner, args.steps, args.profile_sort, args.profile_only)
            cpu_ops(runner, args.steps)
            operand_layouts(runner)
            host, rows = profile(runner, args.steps)
            total = sum(r[2] for r in rows)
            print(f"== {args.model} compile {name}: host {host:.3f} ms/step, GPU {total / 1e3:.3f} ms/step, "
                  f"notes {runner.notes}", flush=True)
            for key, count, us in rows[:14]:
                print(f"   {count:4d} x {us:9.1f} us  {key[:110]}")
            del runner
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
