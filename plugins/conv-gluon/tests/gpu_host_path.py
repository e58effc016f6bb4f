"""On the H100, in one run of a minute or two: what conv-gluon's launch path costs and whether it holds up.

- ``graph``: a small model's training step (forward and backward, ``backend="gluon"``) captured in a CUDA graph,
  replayed on new data, against the same step run eagerly (loss and every gradient, bit for bit), and whether
  gluon ran in all three directions inside the capture;
- ``host``: host time per call (``--calls`` calls without waiting for the GPU, median of five) of a tiny bf16
  layer where the GPU waits for the host: ``F.conv2d``; every gluon candidate's ``run`` in each direction,
  through the launch site and through the JIT (``CONV_CORE_JIT_LAUNCH=1``); ``conv_core.conv2d(...,
  backend="gluon")``; forward + backward through each;
- ``compiles``: Triton's compiled kernels counted (the JIT's caches of the plugin's kernels) while every gluon
  candidate of a layer runs at batch 8, then at batch 16, then at an image 16 pixels larger (same kernel id):
  a new batch or image size must compile nothing (a box kernel whose box follows the image, or a changed
  configuration, is reported as such: its tile changed); and the same for a converted model's forward and
  backward at batch 8, 16 and a larger image.

Usage (from the repository root, conv-core and conv-gluon installed)::

    python3 plugins/conv-gluon/tests/gpu_host_path.py OUT.json [--calls 2000]

Writes ``OUT.json`` and prints a summary; exits 1 when the graph differs from eager, a new batch size compiles
a kernel whose tile did not change, or the launch site gives other bits than the JIT.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

LAYER = dict(batch=2, channels=64, size=8)  # the host-bound layer: 2x64x8x8, 3x3, bf16, channels-last
CHANNELS_LAST = torch.channels_last


def _nhwc(*shape, requires_grad=False) -> torch.Tensor:
    t = torch.randn(*shape, device="cuda", dtype=torch.bfloat16).to(memory_format=CHANNELS_LAST)
    return t.requires_grad_(requires_grad)


def host_us(fn, calls: int) -> float:
    """Median host time of one call over five rounds of ``calls`` calls (the GPU is not waited for in a round)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(rounds), 2)


def timed(fn, calls: int) -> float | str:
    """:func:`host_us`, or the error that stopped it (the core's path may refuse a call)."""
    try:
        return host_us(fn, calls)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:500]


# ---- graph ------------------------------------------------------------------------------------------------------


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, stride=2, padding=1),
              torch.nn.ReLU(), torch.nn.Conv2d(64, 32, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 8, 3, padding=1)]
    return torch.nn.Sequential(*layers).cuda().to(torch.bfloat16, memory_format=CHANNELS_LAST)


def _step(model, x):
    loss = model(x).float().square().mean()
    loss.backward()
    return loss


def check_graph() -> dict:
    import conv_core
    from conv_core.engine import get_engine
    from conv_gluon import launch

    ran = []
    sites = launch._Run.sites
    launch._Run.sites = lambda run, device: ran.append(run.problem.direction) or sites(run, device)
    try:
        model = conv_core.convert(_model(), backend="gluon")
        static_x = _nhwc(8, 16, 32, 32)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model.zero_grad(set_to_none=True)
                _step(model, static_x)
        torch.cuda.current_stream().wait_stream(side)
        model.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        ran.clear()
        with torch.cuda.graph(graph):
            static_loss = _step(model, static_x)
        captured = sorted(set(ran))
    finally:
        launch._Run.sites = sites
    new_x = torch.randn_like(static_x)
    static_x.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    loss, grads = static_loss.clone(), [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    eager = _step(model, new_x)
    same = bool(torch.equal(loss, eager)) and all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
    failures = list(get_engine().registry.get("gluon").failures)
    ok = same and captured == ["bwd_data", "bwd_weight", "fwd"] and not failures
    return dict(ok=ok, bitwise_equal=same, gluon_directions_captured=captured, plugin_failures=failures,
                loss=float(loss))


# ---- host time --------------------------------------------------------------------------------------------------


def _candidates(problem):
    from conv_core.candidate import Candidate
    from conv_gluon.candidates import candidates

    return [c for c in candidates(problem, torch.device("cuda")) if isinstance(c, Candidate)]


def _problem(direction: str, batch: int, size: int, channels: int = 64):
    from conv_core.problem import ConvProblem

    return ConvProblem("fwd", batch, channels, channels, (size, size), 3, 1, 1, 1, dtype="bfloat16",
                       layout="channels_last", arch="sm_90", bias=direction == "fwd").with_direction(direction)


def measure_host(calls: int) -> dict:
    import conv_core
    from conv_core.reference import random_operands

    n, c, s = LAYER["batch"], LAYER["channels"], LAYER["size"]
    x, w, b = _nhwc(n, c, s, s), _nhwc(c, c, 3, 3), torch.randn(c, device="cuda", dtype=torch.bfloat16)
    found = {"F.conv2d": timed(lambda: F.conv2d(x, w, b, padding=1), calls),
             "conv_core.conv2d gluon": timed(lambda: conv_core.conv2d(x, w, b, padding=1, backend="gluon"), calls)}
    mismatches = []
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        problem = _problem(direction, n, s, c)
        for candidate in _candidates(problem):
            operands = random_operands(problem, torch.device("cuda"), 1)
            call = functools.partial(candidate.run, *operands)
            os.environ["CONV_CORE_JIT_LAUNCH"] = "1"
            through_jit = call()
            found[f"{candidate.kernel_id} jit"] = host_us(call, calls // 4)
            del os.environ["CONV_CORE_JIT_LAUNCH"]
            direct = call()
            found[f"{candidate.kernel_id} site"] = host_us(call, calls)
            if not torch.equal(direct, through_jit):
                mismatches.append(candidate.kernel_id)
    xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()

    def train(fn):
        return lambda: fn(xg, wg, bg, padding=1).sum().backward()

    found["F.conv2d fwd+bwd"] = timed(train(F.conv2d), calls // 4)
    found["conv_core.conv2d gluon fwd+bwd"] = timed(train(lambda *a, **k: conv_core.conv2d(*a, **k, backend="gluon")),
                                                    calls // 4)
    return dict(us=found, site_differs_from_jit=mismatches)


# ---- compilations -----------------------------------------------------------------------------------------------


def compiled_kernels() -> int:
    """Kernels the JIT holds compiled for the plugin's three kernels (every device)."""
    from conv_gluon.kernels.bwd_weight import conv_bwd_weight, sum_splits
    from conv_gluon.kernels.fwd import conv_fwd

    return sum(len(cache[0]) for kernel in (conv_fwd, conv_bwd_weight, sum_splits)
               for cache in kernel.device_caches.values())


def _tile(candidate) -> tuple:
    """What a candidate's kernels are compiled with beyond the specialization: its configuration, its boxes and,
    for the weight gradient, whether the reduction is split (float32 partials and their sum, or dW itself)."""
    p = candidate.run.plan
    plans = [ph.plan for ph in p.phases] if hasattr(p, "phases") else [p]
    return (candidate.config, tuple(lp.x_map.block if lp.x_map is not None else None for lp in plans),
            getattr(p, "split", None))


def count_compiles() -> dict:
    from conv_core.reference import random_operands

    base = {}
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        problem = _problem(direction, 8, 32)
        for candidate in _candidates(problem):
            candidate.run(*random_operands(problem, torch.device("cuda"), 1))
            base[candidate.kernel] = (direction, _tile(candidate))
    torch.cuda.synchronize()
    results, unexpected = {}, []
    for label, batch, size in (("batch 16", 16, 32), ("image +16", 8, 48)):
        rows = []
        for direction in ("fwd", "bwd_data", "bwd_weight"):
            problem = _problem(direction, batch, size)
            for candidate in _candidates(problem):
                before = compiled_kernels()
                candidate.run(*random_operands(problem, torch.device("cuda"), 1))
                new = compiled_kernels() - before
                same_tile = base.get(candidate.kernel, (None, None))[1] == _tile(candidate)
                rows.append(dict(kernel=candidate.kernel, config=candidate.config, new_compiles=new,
                                 same_tile=same_tile, tile=repr(_tile(candidate))))
                if new and same_tile:
                    unexpected.append(f"{label}: {candidate.kernel_id}")
        results[label] = rows
    results["model"] = model_compiles()
    return dict(per_candidate=results, unexpected=unexpected)


def model_compiles() -> dict:
    """A converted model's training step at batch 8, then 16, then a 16-pixel larger image: new compilations."""
    import conv_core

    model = conv_core.convert(_model(), backend="gluon")
    counts = {}
    for label, batch, size in (("batch 8", 8, 32), ("batch 16", 16, 32), ("image +16", 16, 48)):
        before = compiled_kernels()
        started = time.perf_counter()
        model.zero_grad(set_to_none=True)
        _step(model, _nhwc(batch, 16, size, size))
        torch.cuda.synchronize()
        counts[label] = dict(new_compiles=compiled_kernels() - before,
                             seconds=round(time.perf_counter() - started, 3))
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the results (JSON)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing round")
    args = parser.parse_args(argv)
    import triton

    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    for name, fn in (("graph", check_graph), ("host", lambda: measure_host(args.calls)),
                     ("compiles", count_compiles)):
        started = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as exc:  # recorded; the others still run
            result[name] = dict(error=f"{type(exc).__name__}: {exc}"[:2000])
        result[name]["seconds"] = round(time.perf_counter() - started, 1)
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    failed = (not result["graph"].get("ok") or result["host"].get("site_differs_from_jit", ["error"])
              or result["compiles"].get("unexpected", ["error"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
