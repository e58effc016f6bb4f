"""Where converted models lose time, and where a plugin call's host time goes (a diagnostic, run on the GPU).

    python3 scripts/gpu_attribution.py --out DIR [--models resnet50,densenet121 --modes eager,train]
                                       [--host-calls 300] [--step-profile mobilenet_v3_large --steps 50]

For each model and mode: :func:`conv_tools.model_attribution.attribute_mode` (each convolution's host and GPU
time plain and converted, its layouts, kernels and route; the other ops by name), printed as
:func:`~conv_tools.model_attribution.describe` lines and written to ``DIR/attribution.json``. Then one small
layer (2x64x8x8, 3x3, bf16 channels-last) called through each backend, forward and forward + backward: host
microseconds per call and the Python functions that take them (cProfile), into ``DIR/host_profile.txt``.
With ``--step-profile MODELS``: each model's eager step, plain and converted, under cProfile (``--steps`` steps
each, after warm-up), and the Python functions whose host time per step differs most between the two, into
``DIR/step_profile.txt``: where a converted model's host time goes beyond its convolutions' calls.
Plain PyTorch runs with ``torch.backends.cudnn.benchmark = True``, as in the real-model benchmark.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import conv_core
from conv_tools import bench_models
from conv_tools.model_attribution import attribute_mode, describe
from conv_tools.model_bench import (ModelBenchConfig, cast_input, cudnn_benchmark, make_variants, model_picks,
                                    weights_dtype)
from conv_tools.model_bench_modes import prepare


def attribute_models(models: list[str], modes: list[str], out: Path) -> None:
    records = []
    for name in models:
        spec = bench_models.get(name)
        config = ModelBenchConfig(model=name, modes=tuple(modes))
        base = bench_models.build(name).cuda()
        x = spec.example(spec.default_batch, "cuda")
        with cudnn_benchmark():
            picks = model_picks(base, x, config).get("conv")
            for mode in modes:
                start = time.perf_counter()
                try:
                    record = attribute_mode(mode, base, x, config, picks)
                except Exception as exc:  # one model failing must not end the others
                    print(f"{name} {mode}: FAILED {type(exc).__name__}: {exc}", flush=True)
                    continue
                record["model"] = name
                records.append(record)
                print(f"{name} {mode} ({time.perf_counter() - start:.0f} s):", flush=True)
                print("\n".join(describe(record, 6)), flush=True)
        (out / "attribution.json").write_text(json.dumps(records, indent=1))
        del base
        torch.cuda.empty_cache()


def step_profile(models: list[str], steps: int, out: Path) -> None:
    """Per model: host microseconds per eager step, plain and converted, each function's share (cProfile), and the
    functions whose time per step differs most."""
    report = io.StringIO()
    for name in models:
        spec, config = bench_models.get(name), ModelBenchConfig(model=name, modes=("eager",))
        base = bench_models.build(name).cuda()
        x = cast_input(spec.example(spec.default_batch, "cuda"), weights_dtype("eager", config), config.layout)
        per_step = {}
        with cudnn_benchmark():
            for variant, build in make_variants(base, "eager", config).items():
                if variant == "fused":
                    continue
                runner = prepare("eager", build(), x, amp_dtype=torch.bfloat16)
                for _ in range(5):
                    runner.step()
                torch.cuda.synchronize()
                profiler = cProfile.Profile()
                profiler.enable()
                for _ in range(steps):
                    runner.step()
                profiler.disable()
                torch.cuda.synchronize()
                per_step[variant] = {f"{path.rsplit('/', 1)[-1]}:{line}({function})": tottime / steps * 1e6
                                     for (path, line, function), (_, _, tottime, _, _)
                                     in pstats.Stats(profiler).stats.items()}
                del runner
        plain, conv = per_step["plain"], per_step["conv"]
        rows = sorted(set(plain) | set(conv), key=lambda f: -abs(conv.get(f, 0.0) - plain.get(f, 0.0)))[:30]
        report.write(f"==== {name}, eager, {steps} steps: host us per step (cProfile) plain {sum(plain.values()):.0f}, "
                     f"converted {sum(conv.values()):.0f}\n")
        for f in rows:
            report.write(f"  {conv.get(f, 0.0) - plain.get(f, 0.0):+9.1f}  plain {plain.get(f, 0.0):8.1f}  "
                         f"conv {conv.get(f, 0.0):8.1f}  {f}\n")
        print("==== " + report.getvalue().rsplit("==== ", 1)[-1][:3000], flush=True)
        del base
        torch.cuda.empty_cache()
    (out / "step_profile.txt").write_text(report.getvalue())


def host_profile(calls: int, out: Path) -> None:
    """Host microseconds per call of one small layer through F.conv2d and each backend, and a cProfile of each."""
    x = torch.randn(2, 64, 8, 8, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    variants = {"F.conv2d": lambda a, b: F.conv2d(a, b, None, 1, 1)}
    for backend in [b.name for b in conv_core.get_engine().registry.active()] + ["aten"]:
        variants[f"conv_core[{backend}]"] = functools.partial(_core_call, backend=backend)
    report = io.StringIO()
    for what in ("fwd", "fwd_bwd"):
        for label, call in variants.items():
            once = functools.partial(_step, call, x.detach().requires_grad_(what == "fwd_bwd"),
                                     w.detach().requires_grad_(what == "fwd_bwd"))
            try:
                report.write(_host_case(f"{what} {label}", once, calls))
            except Exception as exc:
                print(f"host {what} {label}: FAILED {exc}")
    (out / "host_profile.txt").write_text(report.getvalue())


def _core_call(a, b, backend):
    return conv_core.conv2d(a, b, None, 1, 1, backend=backend)


def _step(call, a, b):
    """One call, with its backward when the operands need gradients."""
    if not a.requires_grad:
        with torch.no_grad():
            return call(a, b)
    y = call(a, b)
    y.backward(torch.ones_like(y))
    return y


def _host_case(label: str, once, calls: int) -> str:
    """Print the host time per call of ``once``; return a cProfile of ``calls`` calls, heaviest functions first."""
    for _ in range(20):
        once()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        once()
    host_us = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    print(f"host {label}: {host_us:.1f} us per call (host loop, no sync inside)", flush=True)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        once()
    profiler.disable()
    torch.cuda.synchronize()
    stats = io.StringIO()
    pstats.Stats(profiler, stream=stats).sort_stats("tottime").print_stats(18)
    return f"==== {label}: {host_us:.1f} us per call\n{stats.getvalue()}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="resnet50,mobilenet_v3_large,densenet121,vgg16_bn,dcgan_generator")
    parser.add_argument("--modes", default="eager,train")
    parser.add_argument("--host-calls", type=int, default=300)
    parser.add_argument("--step-profile", default="", help="comma list of models whose eager step is profiled")
    parser.add_argument("--steps", type=int, default=50, help="--step-profile: profiled steps per variant")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    if args.host_calls:
        host_profile(args.host_calls, out)
    if args.step_profile:
        step_profile(args.step_profile.split(","), args.steps, out)
    if args.models:
        attribute_models(args.models.split(","), args.modes.split(","), out)


if __name__ == "__main__":
    main()
