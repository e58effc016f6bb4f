"""Every layer of some suites called as a model calls it: through ``conv_core.conv*d`` or ``conv_transpose*d``.

``gpu_suite_checks.py`` checks each candidate of each problem; this checks what a user's call gets, the
ranking's choice with the shipped tables and the autograd around it, and times it the way a model runs it:

- the forward and both gradients of every layer (a suite's ``transposed`` layers through
  ``conv_transpose*d``) against the float64 reference of the problem each one solves, under the tolerance
  model: a transposed layer's output is its convolution's data gradient, its input gradient that
  convolution's forward, its weight gradient the convolution's weight gradient with the roles swapped;
- eager time per call, the forward (``torch.no_grad``) and a forward + backward, measured with CUDA events
  around a loop of calls, so that host time counts wherever it is the bound, against ``F.conv*d`` /
  ``F.conv_transpose*d`` with ``torch.backends.cudnn.benchmark = True`` on the same tensors.

Usage (on the GPU machine): ``python3 scripts/gpu_layer_calls.py --suites video_resnet:8,seg_head_transposed:8
--out DIR [--layouts nhwc,nchw --dtype bf16 --reps 30 --backend rdna]``; writes ``DIR/layer_calls.json`` and
prints a line per layer and a geomean per suite and layout.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

import conv_core
from conv_core.arch import device_arch
from conv_core.engine import get_engine
from conv_core.reference import compare, random_operands
from conv_tools.suites import load_suite

DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", required=True, help="comma-separated NAME:BATCH")
    p.add_argument("--out", required=True)
    p.add_argument("--layouts", default="nhwc,nchw")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--backend", default=None, help="force conv-core's calls onto this backend (default: the ranking)")
    return p.parse_args(argv)


def output_padding(problem) -> tuple[int, ...]:
    """The ``output_padding`` that gives a transposed convolution its convolution's input size."""
    return tuple(size - ((out - 1) * s - 2 * pad[0] + d * (k - 1) + 1) for size, out, s, pad, d, k in zip(
        problem.input_size, problem.output_size, problem.stride, problem.padding, problem.dilation,
        problem.filter_size))


class LayerCall:
    """One suite layer as two callables on the same operands: conv-core's and PyTorch's."""

    def __init__(self, layer, problem, backend: str | None = None) -> None:
        self.layer, self.problem = layer, problem  # problem: what the call's forward solves
        n = problem.ndim
        geometry = dict(stride=problem.stride, dilation=problem.dilation, groups=problem.groups)
        self.pads = None
        padding = problem.symmetric_padding
        if getattr(layer, "transposed", False):
            geometry.update(padding=padding, output_padding=output_padding(problem))
            self.ours, self.theirs = getattr(conv_core, f"conv_transpose{n}d"), getattr(F, f"conv_transpose{n}d")
        else:
            if padding is None:  # what a model does for asymmetric padding: pad, then convolve unpadded
                self.pads = [v for pair in reversed(problem.padding) for v in pair]
                padding = 0
            geometry.update(padding=padding)
            self.ours, self.theirs = getattr(conv_core, f"conv{n}d"), getattr(F, f"conv{n}d")
        self.geometry = geometry
        self.backend = {} if backend is None else {"backend": backend}

    def run(self, fn, x, w):
        if self.pads is not None:
            x = F.pad(x, self.pads)
        return fn(x, w, None, **self.geometry, **(self.backend if fn is self.ours else {}))


def gradient_problems(call: LayerCall):
    """(problem of the input gradient, problem of the weight gradient, their operands' order): a convolution's
    are its data and weight gradients; a transposed convolution's its convolution's forward and weight gradient
    with the output gradient as the input."""
    p = call.problem
    if p.direction == "bwd_data":  # transposed: x plays dy
        return p.with_direction("fwd"), p.with_direction("bwd_weight"), "transposed"
    return p.with_direction("bwd_data"), p.with_direction("bwd_weight"), "conv"


def picked(problem, device, backend: str | None):
    """The candidate the ranking runs for ``problem``: its declared error factor (Winograd's) is part of the
    tolerance its result is held to."""
    return get_engine().ranking(problem, device, backend, may_time=False).best.candidate


def check(call: LayerCall, device) -> list[str]:
    """Failures of the forward and both gradients against float64 (empty: all within tolerance), each held to
    the tolerance of the candidate that computed it."""
    operands = random_operands(call.problem, device, seed=1)
    x, w = (t.detach().requires_grad_(True) for t in operands[:2])
    y = call.run(call.ours, x, w)
    torch.manual_seed(2)
    g = torch.randn_like(y)  # the output's layout, as autograd hands it to the backward
    dx, dw = torch.autograd.grad(y, (x, w), g)
    x, w = x.detach(), w.detach()
    p_dx, p_dw, kind = gradient_problems(call)
    backend = call.backend.get("backend")

    def held(problem, out, operands):
        return compare(problem, out, operands, picked(problem, device, backend))

    fwd_operands = (x, w) if kind == "transposed" else (x, w, None)
    results = [("output", held(call.problem, y.detach(), fwd_operands))]
    if kind == "transposed":
        results += [("input gradient", held(p_dx, dx, (g, w, None))), ("weight gradient", held(p_dw, dw, (g, x)))]
    elif call.pads is None:  # padded calls: the gradient flows through F.pad, checked by the output alone
        results += [("input gradient", held(p_dx, dx, (g, w))), ("weight gradient", held(p_dw, dw, (x, g)))]
    return [f"{what}: {r.message}" for what, r in results if not r.ok]


def eager_us(fn, reps: int) -> float:
    """Mean time per call of a loop of ``fn()`` calls, CUDA events around the loop (host time included)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / reps


def timings(call: LayerCall, device, reps: int) -> dict[str, float]:
    operands = random_operands(call.problem, device, seed=3)
    x, w = (t.detach().requires_grad_(True) for t in operands[:2])
    g = torch.randn_like(call.run(call.theirs, x, w))
    out = {}
    for name, fn in (("ours", call.ours), ("torch", call.theirs)):
        def forward(fn=fn):
            with torch.no_grad():
                call.run(fn, x, w)

        def train_step(fn=fn):
            call.run(fn, x, w).backward(g)

        out[f"{name}_fwd_us"] = eager_us(forward, reps)
        out[f"{name}_train_us"] = eager_us(train_step, reps)
    return out


def geomean(values) -> float:
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    arch = device_arch(device)
    rows, failures = [], 0
    for spec in args.suites.split(","):
        name, _, batch = spec.partition(":")
        suite = load_suite(name)
        for layout in args.layouts.split(","):
            ratios = {"fwd": [], "train": []}
            for layer in suite.layers:
                problem = layer.problem(int(batch or suite.default_batch), dtype=DTYPES[args.dtype],
                                        layout=LAYOUTS[layout], direction="fwd", arch=arch)
                call = LayerCall(layer, problem, args.backend)
                started = time.perf_counter()
                try:
                    issues = check(call, device)
                    times = timings(call, device, args.reps)
                except Exception as exc:  # a crash is a failure of this layer, reported, not the end of the run
                    issues, times = [f"raised {type(exc).__name__}: {exc}".splitlines()[0]], {}
                failures += bool(issues)
                fwd = times.get("torch_fwd_us", math.nan) / times.get("ours_fwd_us", math.nan)
                train = times.get("torch_train_us", math.nan) / times.get("ours_train_us", math.nan)
                ratios["fwd"].append(fwd)
                ratios["train"].append(train)
                rows.append({"suite": name, "layer": layer.name, "layout": layout, "problem": problem.key,
                             "transposed": getattr(layer, "transposed", False), "count": layer.count,
                             "issues": issues, **times, "fwd_speedup": fwd, "train_speedup": train})
                print(f"{name} {layout} {layer.name}: {'ok' if not issues else 'FAILED ' + '; '.join(issues)}; "
                      f"eager fwd {fwd:.2f}x, train step {train:.2f}x ({time.perf_counter() - started:.1f} s)",
                      flush=True)
            print(f"== {name} {layout}: eager forward geomean {geomean(ratios['fwd']):.3f}x, training step "
                  f"{geomean(ratios['train']):.3f}x F.* (cudnn.benchmark)", flush=True)
    with open(f"{args.out}/layer_calls.json", "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": args.dtype,
                   "reps": args.reps, "rows": rows}, f, indent=1)
    print(f"{len(rows)} layer calls, {failures} with failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
