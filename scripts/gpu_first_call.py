"""First-call cost on the GPU: how long a converted model's first forward takes on an empty Triton cache, and
what a new batch size or image size costs after it, against plain PyTorch; then the same after
``conv-core warmup``.

Usage (on the GPU machine, from the repository root, packages installed)::

    python3 scripts/gpu_first_call.py OUT.json [--model resnet50 --batch 32 --new-batch 16 --new-size 256]

Every measurement runs in a fresh process, so nothing compiled or cached in memory carries over:

1. ``plain``: torchvision's model (random weights), bf16, channels-last, eval, ``cudnn.benchmark = True``;
2. ``conv cold``: the same model after ``conv_core.convert``, on an empty Triton cache (its own
   ``TRITON_CACHE_DIR``);
3. ``conv-core warmup --model ...`` into another empty cache, timed;
4. ``conv warm``: the converted model again, on the cache the warmup filled.

Each process times, with the GPU synchronised: the first forward at ``--batch`` x 224 x 224, a second one
(steady state), the first and second at ``--new-batch``, then at ``--new-size`` squared; and counts the kernels
the Triton cache gained at each step (how many were compiled). The result is written as JSON to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Steps each process runs, in order: (name, batch, image size) with ``None`` for the command line's values.
STEPS = (("first", None, 224), ("again", None, 224), ("new_batch", "new", 224), ("new_batch_again", "new", 224),
         ("new_size", None, "new"), ("new_size_again", None, "new"))


def compiled_kernels(cache: str | None) -> int:
    """Kernels in a Triton cache directory (one compiled binary each; launcher stubs are not counted)."""
    if not cache or not os.path.isdir(cache):
        return 0
    return sum(1 for path in Path(cache).rglob("*") if path.suffix in (".cubin", ".hsaco"))


def child(args: argparse.Namespace) -> dict:
    """One process's measurements (``--child plain`` or ``--child conv``)."""
    started = time.perf_counter()
    import torch
    from torchvision import models

    torch.backends.cudnn.benchmark = args.child == "plain" or args.conv_cudnn_benchmark
    result = {"mode": args.child, "cudnn_benchmark": torch.backends.cudnn.benchmark,
              "triton_cache": os.environ.get("TRITON_CACHE_DIR"), "steps": {}}
    model = models.get_model(args.model, weights=None).eval()
    model = model.to(device=args.device, dtype=torch.bfloat16, memory_format=torch.channels_last)
    if args.child == "conv":
        import conv_core

        conv_core.convert(model)
    result["setup_s"] = time.perf_counter() - started
    cache = os.environ.get("TRITON_CACHE_DIR")
    synchronize = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    with torch.no_grad():
        for name, batch, size in STEPS:
            batch = args.new_batch if batch == "new" else args.batch
            size = args.new_size if size == "new" else size
            x = torch.randn(batch, 3, size, size, device=args.device, dtype=torch.bfloat16)
            x = x.contiguous(memory_format=torch.channels_last)
            before = compiled_kernels(cache)
            synchronize()
            t0 = time.perf_counter()
            model(x)
            synchronize()
            result["steps"][name] = {"batch": batch, "size": size, "s": time.perf_counter() - t0,
                                     "kernels_compiled": compiled_kernels(cache) - before}
    if args.child == "conv":
        result["picks"] = picks()
    return result


def picks() -> dict[str, int] | str:
    """How many of the engine's cached rankings chose each backend (what the converted model ran); the engine's
    internals, so a description of the failure rather than a failed measurement if they moved."""
    try:
        from conv_core.engine import get_engine

        counts: dict[str, int] = {}
        for ranking in get_engine()._rankings.values():
            backend = ranking.best.candidate.backend
            counts[backend] = counts.get(backend, 0) + 1
        return counts
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def run_child(mode: str, args: argparse.Namespace, cache: str | None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["TRITON_CACHE_DIR"] = cache
    command = [sys.executable, __file__, "--child", mode, "--model", args.model, "--batch", str(args.batch),
               "--new-batch", str(args.new_batch), "--new-size", str(args.new_size), "--device", args.device]
    if args.conv_cudnn_benchmark:
        command.append("--conv-cudnn-benchmark")
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        return {"mode": mode, "error": done.stderr[-3000:], "wall_s": time.perf_counter() - started}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


def run_warmup(args: argparse.Namespace, cache: str) -> dict:
    """``conv-core warmup`` of the model at the first batch size and 224 x 224, into ``cache``."""
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    command = [sys.executable, "-m", "conv_core.cli", "warmup", "--model", args.model, "--batch", str(args.batch),
               "--image-size", "224", "--dtype", "bf16", "--layout", "nhwc", "--device", args.device]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    return {"command": " ".join(command[1:]), "returncode": done.returncode, "s": time.perf_counter() - started,
            "kernels_compiled": compiled_kernels(cache), "output_tail": (done.stdout + done.stderr)[-2500:]}


def summary(results: dict) -> dict:
    """The figures the issue's targets name: the first forward against plain PyTorch's, and what a new batch size
    and a new image size add (their first forward less their second)."""
    out = {}
    for mode in ("plain", "conv_cold", "conv_warm"):
        steps = results.get(mode, {}).get("steps")
        if steps:
            out[mode] = {"first_s": steps["first"]["s"],
                         **{f"{step}_extra_s": steps[step]["s"] - steps[f"{step}_again"]["s"]
                            for step in ("new_batch", "new_size")},
                         "kernels_compiled": {k: v["kernels_compiled"] for k, v in steps.items()}}
    for mode in ("conv_cold", "conv_warm"):
        if "plain" in out and mode in out:
            out[f"{mode}_first_minus_plain_s"] = out[mode]["first_s"] - out["plain"]["first_s"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="the JSON file to write")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-batch", type=int, default=16)
    parser.add_argument("--new-size", type=int, default=256)
    parser.add_argument("--conv-cudnn-benchmark", action="store_true",
                        help="set torch.backends.cudnn.benchmark in the converted model's processes too")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per process")
    parser.add_argument("--device", default="cuda", help="cuda (default); cpu only tries the script out")
    parser.add_argument("--child", choices=("plain", "conv"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if not args.out:
        parser.error("give the JSON file to write")
    results = {"settings": {k: v for k, v in os.environ.items() if k.startswith("CONV_CORE_")}}
    with tempfile.TemporaryDirectory() as cold, tempfile.TemporaryDirectory() as warmed:
        results["plain"] = run_child("plain", args, None)
        results["conv_cold"] = run_child("conv", args, cold)
        results["warmup"] = run_warmup(args, warmed)
        results["conv_warm"] = run_child("conv", args, warmed)
    results["summary"] = summary(results)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(json.dumps(results["summary"], indent=1))
    return 0 if all("error" not in results[k] for k in ("plain", "conv_cold", "conv_warm")) else 1


if __name__ == "__main__":
    sys.exit(main())
