"""GPU checks of the core (run by scripts/gpu_run.sh on the device machine).

1. ``conv_core.conv2d`` through ``aten`` matches ``F.conv2d`` forward and backward
   (and both stay within the float64 tolerance model);
2. ``torch.compile(fullgraph=True)`` traces it, forward and backward;
3. it replays correctly inside captured CUDA graphs (forward alone, and a
   module's forward + backward through ``make_graphed_callables``);
4. the host overhead per call against a direct ``F.conv2d``.

Writes ``core_checks.json`` into the folder given as argv[1] and prints a summary.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import conv_core
from conv_core.frontend.call import problem_of_tensors
from conv_core.reference import compare

DEVICE = torch.device("cuda")
LAYERS = [  # (n, c, k, hw, filter, stride, padding, groups)
    (8, 64, 64, 56, 3, 1, 1, 1),
    (8, 256, 512, 56, 1, 2, 0, 1),
    (4, 3, 64, 224, 7, 2, 3, 1),
    (4, 128, 128, 32, 3, 1, 1, 128),
    (2, 64, 96, 31, 3, 2, ((1, 0), (0, 1)), 2),
]


def _tensors(n, c, k, hw, f, groups, dtype, layout, seed):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(n, c, hw, hw, device=DEVICE, generator=g).to(dtype)
    w = (torch.randn(k, c // groups, f, f, device=DEVICE, generator=g) / (c // groups * f * f) ** 0.5).to(dtype)
    b = torch.randn(k, device=DEVICE, generator=g).to(dtype)
    if layout == "channels_last":
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    return [t.requires_grad_() for t in (x, w, b)]


def _torch_conv(x, w, b, stride, padding, groups):
    if isinstance(padding, tuple):
        x = F.pad(x, [v for pair in reversed(padding) for v in pair])
        padding = 0
    return F.conv2d(x, w, b, stride, padding, 1, groups)


def check_matches_torch() -> list[dict]:
    """Forward and backward equal PyTorch's, and are within the tolerance model of the float64 reference."""
    rows = []
    for i, (n, c, k, hw, f, stride, padding, groups) in enumerate(LAYERS):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for layout in ("channels_first", "channels_last"):
                x, w, b = _tensors(n, c, k, hw, f, groups, dtype, layout, seed=i)
                y = conv_core.conv2d(x, w, b, stride, padding, groups=groups)
                ref = _torch_conv(x, w, b, stride, padding, groups)
                gy = torch.randn_like(ref)
                mine = torch.autograd.grad(y, (x, w, b), gy)
                theirs = torch.autograd.grad(ref, (x, w, b), gy)
                problem = problem_of_tensors(x, w, b, stride, padding, groups=groups)
                chosen = conv_core.get_engine().ranking(problem, DEVICE).best.candidate  # its tags: tf32
                tolerance = compare(problem, y.detach(), (x.detach(), w.detach(), b.detach()), chosen)
                rows.append({
                    "layer": i, "dtype": str(dtype), "layout": layout,
                    "fwd_max_abs_diff_vs_torch": float((y - ref).detach().abs().max()),
                    "bwd_max_rel_diff_vs_torch": max(float((a - t).abs().max() / t.abs().max())
                                                     for a, t in zip(mine, theirs)),
                    "fwd_within_tolerance": tolerance.ok, "fwd_rel_l2_vs_float64": tolerance.relative_l2,
                })
    return rows


def check_compile() -> dict:
    x, w, b = _tensors(8, 64, 64, 28, 3, 1, torch.bfloat16, "channels_last", seed=7)

    def step(x, w, b):
        return conv_core.conv2d(x, w, b, padding=1, activation="relu")

    compiled = torch.compile(step, fullgraph=True)
    y_eager, y_comp = step(x, w, b), compiled(x, w, b)
    gy = torch.randn_like(y_eager)
    g_eager = torch.autograd.grad(y_eager, (x, w, b), gy)
    g_comp = torch.autograd.grad(y_comp, (x, w, b), gy)
    return {"fwd_max_abs_diff": float((y_eager - y_comp).detach().abs().max()),
            "bwd_max_abs_diff": max(float((a - c).abs().max()) for a, c in zip(g_eager, g_comp))}


def check_cuda_graph() -> dict:
    x, w, b = (t.detach() for t in _tensors(8, 64, 128, 28, 3, 1, torch.bfloat16, "channels_last", seed=3))
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            conv_core.conv2d(static_x, w, b, padding=1)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = conv_core.conv2d(static_x, w, b, padding=1)
    fresh = torch.randn_like(x)
    static_x.copy_(fresh)
    graph.replay()
    fwd_diff = float((static_y - F.conv2d(fresh, w, b, padding=1)).abs().max())

    module = conv_core.nn.Conv2d(64, 64, 3, padding=1).to(DEVICE, torch.bfloat16, memory_format=torch.channels_last)
    reference = torch.nn.Conv2d(64, 64, 3, padding=1).to(DEVICE, torch.bfloat16, memory_format=torch.channels_last)
    reference.load_state_dict(module.state_dict())
    sample = torch.randn(8, 64, 28, 28, device=DEVICE, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last).requires_grad_()  # a leaf: no history for the graph to reach
    graphed = torch.cuda.make_graphed_callables(module, (sample,))
    inp = torch.randn_like(sample).requires_grad_()
    out = graphed(inp)
    out.float().square().sum().backward()
    inp_ref = inp.detach().clone().requires_grad_()
    ref_out = reference(inp_ref)
    ref_out.float().square().sum().backward()
    return {"forward_replay_max_abs_diff": fwd_diff,
            "graphed_module_fwd_max_abs_diff": float((out - ref_out).abs().max()),
            "graphed_module_input_grad_max_abs_diff": float((inp.grad - inp_ref.grad).abs().max()),
            "graphed_module_weight_grad_max_abs_diff": float((module.weight.grad - reference.weight.grad).abs().max())}


def _per_call_us(fn, calls=3000, repeats=7) -> float:
    """Median over repeats of the mean wall time per call of a launch-bound loop."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def measure_host_overhead() -> dict:
    """A tiny convolution, so the GPU waits on the host: the per-call difference is our host overhead."""
    x = torch.randn(1, 8, 8, 8, device=DEVICE, dtype=torch.float16)
    w = torch.randn(8, 8, 3, 3, device=DEVICE, dtype=torch.float16)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    for fn in (lambda: F.conv2d(x, w, padding=1), lambda: conv_core.conv2d(x, w, padding=1)):
        _per_call_us(fn, calls=200, repeats=1)
    direct = _per_call_us(lambda: F.conv2d(x, w, padding=1))
    ours = _per_call_us(lambda: conv_core.conv2d(x, w, padding=1))
    direct_grad = _per_call_us(lambda: F.conv2d(xg, wg, padding=1))
    ours_grad = _per_call_us(lambda: conv_core.conv2d(xg, wg, padding=1))
    return {"F.conv2d_us": direct, "conv_core.conv2d_us": ours, "overhead_us": ours - direct,
            "F.conv2d_requires_grad_us": direct_grad, "conv_core.conv2d_requires_grad_us": ours_grad,
            "overhead_requires_grad_us": ours_grad - direct_grad}


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    torch.backends.cudnn.benchmark = False
    results = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
        "matches_torch": check_matches_torch(), "compile": check_compile(), "cuda_graph": check_cuda_graph(),
        "host_overhead": measure_host_overhead(),
    }
    with open(f"{out_dir}/core_checks.json", "w") as f:
        json.dump(results, f, indent=1)
    bad = [r for r in results["matches_torch"] if not r["fwd_within_tolerance"]
           or r["fwd_max_abs_diff_vs_torch"] > 0 or r["bwd_max_rel_diff_vs_torch"] > 1e-2]
    print(f"matches_torch: {len(results['matches_torch'])} cases, {len(bad)} off: {bad}")
    print("compile:", results["compile"])
    print("cuda_graph:", results["cuda_graph"])
    print("host_overhead:", results["host_overhead"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
