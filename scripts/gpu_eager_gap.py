"""Why a converted model's eager inference is slower: host time and wall time per step, split, per variant.

    python3 scripts/gpu_eager_gap.py --out DIR [--models mobilenet_v3_large,resnet50] [--rounds 7 --steps 20]
                                     [--variants plain,conv,conv_aten,native] [--by-type] [--per-layer]
                                     [--gc] [--ops]

Each step runs alone after a synchronize: ``host`` is the time until ``step()`` returns (the launch queue starts
empty, so no launch waits for the GPU), ``wall`` the time until the GPU is done. A variant that loses host time
is slowed by the path around the kernels; one that loses wall but not host time, by its GPU work. Variants:

- ``plain``: the model as torch runs it (``cudnn.benchmark = True``);
- ``conv``: ``conv_core.convert(plain)``; ``fused``: the same fused for inference (``optimize_for_inference``);
- ``conv_aten``: the same with every layer held to aten (``backend="aten"``): only the path around ``F.conv*d``;
- ``wrapped``: plain with each convolution's forward behind one extra Python function (what one frame costs);
- ``native``: plain with each 2D convolution's forward replaced by the ``torch.conv2d`` call a direct route makes;
- ``cudnn``: plain with each 2D convolution's forward calling ``torch.cudnn_convolution`` itself (no gradient);
- ``fx_fold`` / ``fx_fold_relu``: plain with batch norms folded by ``torch.fx`` (torch's ``fuse``) / and each
  convolution + ReLU as one ``torch.cudnn_convolution_relu`` call (what cuDNN's fused operator saves);
- ``keyed``: ``native`` behind the eager path's 17-field key and one dictionary lookup;
- ``memo_full`` / ``memo_shape``: ``native`` behind a per-module memo checking shape, strides, dtype and grad
  mode / the shape alone.

Printed and written (``DIR/eager_gap.json``, ``DIR/eager_gap.txt``): the process's other threads and launch path
(:func:`process_state`), medians of alternating rounds, then medians
of single steps taken one variant after the other (drift of the host's speed hits all alike), the same for plain
and conv with the garbage collector off, how many convolution calls per step took conv-core's full way
(``conv_core.functional.convolution``) rather than a module's memo, and one step of each under ``torch.profiler``:
the GPU kernels whose count or time differs from plain's. ``--by-type``: with global forward hooks on, the host
time inside each leaf module type's forward, per variant. ``--per-layer``: the host time of each convolution
module's own call (its class swapped for a subclass that times ``__call__``: no hook, so a converted module keeps
its memo path), plain against converted, the layers that differ most with the route the converted one ran.
``--gc``: per variant, the garbage collector's passes per generation and the host time they take per step, and the
cyclic garbage a step leaves, by type (a call that leaves cycles makes collections run more often, and their time
lands on whatever allocates next). ``--ops``: each convolution module called alone on the input it gets in the
model, under the profiler: the operators, launches and kernels of its call, plain against converted, grouped.
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import conv_core
from conv_tools import bench_models
from conv_tools.model_bench import ModelBenchConfig, cast_input, cudnn_benchmark, make_variants, weights_dtype
from conv_tools.model_attribution import convolution_modules


def variants(base, config):
    builders = make_variants(base, "eager", config)

    def conv_aten():
        model = builders["conv"]()
        for _, module in convolution_modules(model):
            module.backend = "aten"
        return model

    def wrapped():
        model = builders["plain"]()
        for _, module in convolution_modules(model):
            inner = module.forward
            module.forward = lambda x, _inner=inner: _inner(x)
        return model

    def native():
        """What the converted model's direct route calls, without the route's lookup."""
        model = builders["plain"]()
        for _, module in convolution_modules(model):
            if type(module) is torch.nn.Conv2d and module.padding_mode == "zeros":
                w, b, args = module.weight, module.bias, (module.stride[0], module.padding[0], module.dilation[0])
                module.forward = lambda x, _w=w, _b=b, _a=args, _g=module.groups: torch.conv2d(x, _w, _b, *_a, _g)
        return model

    def cudnn():
        """Plain with each 2D convolution's forward calling cuDNN's operator itself (``torch.cudnn_convolution``,
        the bias added after it as ``aten._convolution`` adds it): what ``F.conv2d``'s dispatch to it costs."""
        model = builders["plain"]()
        flags = torch.backends.cudnn
        for _, module in convolution_modules(model):
            if type(module) is torch.nn.Conv2d and module.padding_mode == "zeros":
                def forward(x, _m=module, _w=module.weight, _b=module.bias):
                    y = torch.cudnn_convolution(x, _w, _m.padding, _m.stride, _m.dilation, _m.groups,
                                                flags.benchmark, flags.deterministic, flags.allow_tf32)
                    return y if _b is None else y.add_(_b.view(1, -1, 1, 1))
                module.forward = forward
        return model

    def fx_fold():
        """Plain traced by ``torch.fx`` with each batch norm folded into its convolution (torch's own
        ``fuse``): the fused model's convolutions, each then a separate activation."""
        from torch.fx.experimental.optimization import fuse

        return fuse(builders["plain"]().eval())

    def fx_fold_relu():
        """``fx_fold`` with each convolution that feeds only a ReLU called as cuDNN's fused convolution + bias +
        ReLU (``torch.cudnn_convolution_relu``): one call where ``fx_fold`` makes two; and one that feeds only a
        residual add feeding only a ReLU as ``torch.cudnn_convolution_add_relu``: one call for three."""
        traced = fx_fold()
        modules = dict(traced.named_modules())

        def is_relu(node) -> bool:
            return ((node.op == "call_module" and type(modules.get(node.target)) is torch.nn.ReLU)
                    or (node.op == "call_function" and node.target in (torch.relu, torch.nn.functional.relu)))
        for node in list(traced.graph.nodes):
            conv = modules.get(node.target) if node.op == "call_module" else None
            users = list(node.users)
            if type(conv) is not torch.nn.Conv2d or conv.padding_mode != "zeros" or len(users) != 1:
                continue
            add, z = None, None
            if (users[0].op == "call_function" and users[0].target in (operator.add, operator.iadd, torch.add)
                    and len(users[0].args) == 2 and not users[0].kwargs and len(users[0].users) == 1):
                add, z = users[0], next(a for a in users[0].args if a is not node)
                users = list(add.users)
            relu = users[0]
            if not is_relu(relu) or (add is not None and not isinstance(z, torch.fx.Node)):
                continue
            with traced.graph.inserting_after(node):
                weight = traced.graph.get_attr(f"{node.target}.weight")
                bias = traced.graph.get_attr(f"{node.target}.bias") if conv.bias is not None else None
            geometry = (conv.stride, conv.padding, conv.dilation, conv.groups)
            with traced.graph.inserting_after(relu):
                fused = (traced.graph.call_function(torch.cudnn_convolution_relu, (node.args[0], weight, bias,
                                                                                   *geometry)) if add is None
                         else traced.graph.call_function(torch.cudnn_convolution_add_relu, (
                             node.args[0], weight, z, 1.0, bias, *geometry)))
            relu.replace_all_uses_with(fused)
            for done in (relu, add, node):
                if done is not None:
                    traced.graph.erase_node(done)
        traced.graph.lint()
        traced.recompile()
        return traced

    def keyed():
        """``native`` behind the eager path's key (the same tuple) and one dictionary lookup."""
        model = native()
        table = {}
        for _, module in convolution_modules(model):
            if type(module) is torch.nn.Conv2d and module.padding_mode == "zeros":
                inner, w = module.forward, module.weight

                def forward(x, _inner=inner, _w=w, _m=module):
                    key = (x.shape, x.stride(), x.dtype, x.device, _w.shape, _w.dtype, _m.bias is None,
                           torch._C.is_grad_enabled(), torch._C._get_deterministic_algorithms(), 2, _m.stride,
                           _m.padding, _m.dilation, _m.groups, None, None, None)
                    route = table.get(key)
                    if route is None:
                        route = table[key] = _inner
                    return route(x)
                module.forward = forward
        return model

    grad = torch._C.is_grad_enabled

    def memo_full():
        """``native`` behind a per-module memo of the last call's shape, strides, dtype and grad mode."""
        model = native()
        for _, module in convolution_modules(model):
            if type(module) is torch.nn.Conv2d and module.padding_mode == "zeros":
                inner, slot = module.forward, [None, None, None, None]

                def forward(x, _inner=inner, _m=slot):
                    if x.shape == _m[0] and x.stride() == _m[1] and x.dtype is _m[2] and grad() is _m[3]:
                        return _inner(x)
                    _m[:] = [x.shape, x.stride(), x.dtype, grad()]
                    return _inner(x)
                module.forward = forward
        return model

    def memo_shape():
        """``native`` behind a per-module memo of the last call's shape alone."""
        model = native()
        for _, module in convolution_modules(model):
            if type(module) is torch.nn.Conv2d and module.padding_mode == "zeros":
                inner, slot = module.forward, [None]

                def forward(x, _inner=inner, _m=slot):
                    if x.shape == _m[0]:
                        return _inner(x)
                    _m[0] = x.shape
                    return _inner(x)
                module.forward = forward
        return model

    return {"plain": builders["plain"], "conv": builders["conv"], "fused": builders["fused"], "conv_aten": conv_aten,
            "wrapped": wrapped,
            "native": native, "cudnn": cudnn, "fx_fold": fx_fold, "fx_fold_relu": fx_fold_relu, "keyed": keyed,
            "memo_full": memo_full, "memo_shape": memo_shape}


class TypeTimer:
    """Host microseconds per step spent inside each leaf module type's forward (global forward hooks)."""

    def __init__(self):
        self.totals, self.starts = Counter(), {}

    def __enter__(self):
        self.handles = [torch.nn.modules.module.register_module_forward_pre_hook(self.pre),
                        torch.nn.modules.module.register_module_forward_hook(self.post)]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    def pre(self, module, args):
        self.starts[id(module)] = time.perf_counter_ns()

    def post(self, module, args, out):
        if not any(True for _ in module.children()):
            kind = type(module).__name__
            self.totals[kind] += time.perf_counter_ns() - self.starts[id(module)]


def by_type(models, x, rounds: int, steps: int) -> dict:
    """Per variant and leaf module type: median over rounds of host microseconds per step."""
    samples = {label: {} for label in models}
    for _ in range(rounds):
        for label, model in models.items():
            with TypeTimer() as timer:
                for _ in range(steps):
                    one_step(model, x)
            for kind, ns in timer.totals.items():
                samples[label].setdefault(kind, []).append(ns / steps / 1e3)
    return {label: {kind: statistics.median(v) for kind, v in kinds.items()} for label, kinds in samples.items()}


class LayerTimer:
    """Host microseconds per step inside each convolution module's call, by module name: each convolution's class
    is swapped for a subclass whose ``__call__`` times the class's own (hooks would send a converted module off
    its memo path, which is what is measured)."""

    def __init__(self, model):
        self.model, self.totals, self.swapped = model, Counter(), []

    def __enter__(self):
        totals, clock = self.totals, time.perf_counter_ns
        for name, module in convolution_modules(self.model):
            base = type(module)

            def timed_call(self_, *args, _base=base, _name=name, **kwargs):
                start = clock()
                out = _base.__call__(self_, *args, **kwargs)
                totals[_name] += clock() - start
                return out

            module.__class__ = type(f"Timed{base.__name__}", (base,), {"__call__": timed_call})
            self.swapped.append((module, base))
        return self

    def __exit__(self, *exc):
        for module, base in self.swapped:
            module.__class__ = base


class GcTimer:
    """The garbage collector's passes per generation and the host nanoseconds they take (``gc.callbacks``)."""

    def __init__(self):
        self.ns, self.passes, self.start = [0, 0, 0], [0, 0, 0], 0

    def __enter__(self):
        gc.callbacks.append(self.callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self.callback)

    def callback(self, phase, info):
        if phase == "start":
            self.start = time.perf_counter_ns()
        else:
            self.ns[info["generation"]] += time.perf_counter_ns() - self.start
            self.passes[info["generation"]] += 1


def cyclic_garbage(model, x, steps: int) -> Counter:
    """The objects ``steps`` steps leave in reference cycles (only a collection frees them), by type, per step."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(steps):
            one_step(model, x)
        gc.collect()
        kinds = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    return Counter({kind: n / steps for kind, n in kinds.items()})


def gc_profile(models, x, rounds: int, steps: int) -> dict:
    """Per variant: collector passes per 100 steps by generation, its host us per step, cyclic garbage per step."""
    timers = {label: GcTimer() for label in models}
    for _ in range(rounds):
        for label, model in models.items():
            with timers[label]:
                for _ in range(steps):
                    one_step(model, x)
    total = rounds * steps
    return {label: {"passes_per_100_steps": [100 * n / total for n in timer.passes],
                    "gc_us_per_step": sum(timer.ns) / total / 1e3,
                    "garbage_per_step": dict(cyclic_garbage(models[label], x, steps).most_common(12))}
            for label, timer in timers.items()}


LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaMemsetAsync",
            "cudaMemcpyAsync")


def call_ops(module, x) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """One no-grad call's top-level operators, its launches and its kernels, under the profiler."""
    with torch.no_grad():
        module(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            module(x)
            torch.cuda.synchronize()
    events = prof.events()
    ops = tuple(e.name for e in events if e.device_type == torch.autograd.DeviceType.CPU and e.cpu_parent is None
                and not e.name.startswith(LAUNCHES) and e.name != "cudaDeviceSynchronize")
    launches = sum(1 for e in events if e.name.startswith(LAUNCHES))
    kernels = tuple(e.name[:40] for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return ops, launches, kernels


def layer_ops(models, x) -> dict:
    """Each convolution module called alone on the input it gets in the model (captured by a pre-hook in a step
    of its own), plain against converted: the layers grouped by what their two calls ran."""
    calls = {}
    for label in ("plain", "conv"):
        inputs, handles = {}, []
        for name, module in convolution_modules(models[label]):
            handles.append(module.register_forward_pre_hook(
                lambda m, args, _name=name, _inputs=inputs: _inputs.setdefault(_name, args[0])))
        one_step(models[label], x)
        for handle in handles:
            handle.remove()
        calls[label] = {name: call_ops(module, inputs[name]) for name, module in convolution_modules(models[label])
                        if name in inputs}
    groups = {}
    for name, plain in calls["plain"].items():
        conv = calls["conv"].get(name)
        groups.setdefault(repr((plain, conv)), {"plain": plain, "conv": conv, "layers": []})["layers"].append(name)
    return {"groups": sorted(groups.values(), key=lambda g: -len(g["layers"]))}


def route_of(module) -> str:
    """What a converted module's memo runs for its last no-grad signature: ``F.conv`` or a plugin's kernel id."""
    memos = getattr(module, "_memos", None)
    if not memos or not memos[0]:
        return "-"
    route = next(iter(memos[0].values()))[1]
    if route is None:
        return "full way"
    return "F.conv" if route.native else getattr(route.ranking.best, "kernel_id", type(route).__name__)


def per_layer(models, x, rounds: int, steps: int) -> dict:
    """Per variant and convolution module: median over rounds of host microseconds per step."""
    samples = {label: {} for label in models}
    for _ in range(rounds):
        for label, model in models.items():
            with LayerTimer(model) as timer:
                for _ in range(steps):
                    one_step(model, x)
            for name, ns in timer.totals.items():
                samples[label].setdefault(name, []).append(ns / steps / 1e3)
    return {label: {name: statistics.median(v) for name, v in layers.items()} for label, layers in samples.items()}


BY_TYPE = PER_LAYER = GC = OPS = False
VARIANTS = ("plain", "conv", "fused", "conv_aten", "wrapped", "native", "cudnn", "fx_fold", "fx_fold_relu", "keyed",
            "memo_full", "memo_shape")


def one_step(model, x):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        model(x)
    issued = time.perf_counter()
    torch.cuda.synchronize()
    return (issued - start) * 1e3, (time.perf_counter() - start) * 1e3


def full_way_calls(model, x) -> int:
    """How many of one step's convolution calls went through ``conv_core.functional.convolution``."""
    from conv_core import functional

    calls, original = [], functional.convolution
    functional.convolution = lambda *args: calls.append(1) or original(*args)
    try:
        one_step(model, x)
    finally:
        functional.convolution = original
    return len(calls)


def kernels(model, x):
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
    counts, times = Counter(), Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            counts[event.name[:90]] += 1
            times[event.name[:90]] += event.device_time
    return counts, times


def process_state() -> str:
    """What could slow every host operation of a step alike: the Python threads alive beside the main one (a busy
    one takes the interpreter lock whenever a Triton launch releases it), the interpreter's switch interval, and
    whether Triton's launch hooks send conv-core's launches through Triton's own runner."""
    import sys
    import threading

    from conv_core.launch_site import launch_hooked, triton_runtime

    runtime = triton_runtime()
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    return (f"threads besides main: {others or 'none'}; switch interval {sys.getswitchinterval() * 1e3:.1f} ms; "
            f"launches through Triton's runner: {runtime is not None and launch_hooked(runtime)}")


def gap(name: str, rounds: int, steps: int, report: list[str]) -> dict:
    spec, config = bench_models.get(name), ModelBenchConfig(model=name, modes=("eager",))
    base = bench_models.build(name).cuda()
    x = cast_input(spec.example(spec.default_batch, "cuda"), weights_dtype("eager", config), config.layout)
    with cudnn_benchmark():
        models = {label: build().eval() for label, build in variants(base, config).items() if label in VARIANTS}
        for model in models.values():
            for _ in range(5):
                one_step(model, x)
        with torch.no_grad():
            expected = models["plain"](x).float()
            errors = {label: ((model(x).float() - expected).abs().max() / expected.abs().max()).item()
                      for label, model in models.items()}
        host = {label: [] for label in models}
        wall = {label: [] for label in models}
        for _ in range(rounds):
            for label, model in models.items():
                samples = [one_step(model, x) for _ in range(steps)]
                host[label].append(statistics.median(s[0] for s in samples))
                wall[label].append(statistics.median(s[1] for s in samples))
        profiles = {label: kernels(model, x) for label, model in models.items()}
        full_way = {label: full_way_calls(model, x) for label, model in models.items() if label.startswith("conv")}
        types = by_type(models, x, rounds, steps) if BY_TYPE else {label: {} for label in models}
        layers = per_layer(models, x, rounds, steps) if PER_LAYER else {}
        collector = gc_profile(models, x, rounds, steps) if GC else {}
        ops = layer_ops(models, x) if OPS else {}
        routes = {name: route_of(module) for name, module in convolution_modules(models["conv"])}
        interleaved = {label: [] for label in models}
        for _ in range(steps * rounds):  # one step of each in turn: drift of the host's speed hits all alike
            for label, model in models.items():
                interleaved[label].append(one_step(model, x)[0])
        gc.collect()
        gc.disable()
        no_gc = {label: [] for label in ("plain", "conv")}
        for _ in range(steps * rounds):
            for label in no_gc:
                no_gc[label].append(one_step(models[label], x)[0])
        gc.enable()
    record = {"model": name, "batch": spec.default_batch, "host_ms": host, "wall_ms": wall, "kernels": {},
              "full_way_calls_per_step": full_way, "error_vs_plain": errors,
              "interleaved_host_ms": {k: statistics.median(v) for k, v in interleaved.items()},
              "no_gc_host_ms": {k: statistics.median(v) for k, v in no_gc.items()}}
    first = len(report)
    report.append(f"==== {name} (batch {spec.default_batch}), {rounds} rounds x {steps} single steps")
    report.append(f"process: {process_state()}")
    for label in models:
        h, w = statistics.median(host[label]), statistics.median(wall[label])
        report.append(f"  {label:10s} host {h:7.3f} ms ({min(host[label]):.3f}-{max(host[label]):.3f})  "
                      f"wall {w:7.3f} ms ({min(wall[label]):.3f}-{max(wall[label]):.3f})  "
                      f"kernels {sum(profiles[label][0].values())}, "
                      f"GPU {sum(profiles[label][1].values()) / 1e3:.3f} ms")
    report.append("  output against plain's, max |y - y_plain| / max |y_plain|: " + ", ".join(
        f"{k} {v:.2g}" for k, v in errors.items()))
    report.append(f"  calls per step that took the full way (conv_core.functional.convolution): {full_way}, of "
                  f"{len(convolution_modules(base))} convolution modules")
    report.append(f"  interleaved single steps ({steps * rounds} each), host ms median: " + ", ".join(
        f"{k} {v:.3f}" for k, v in record["interleaved_host_ms"].items()))
    report.append("  the same with the garbage collector off: " + ", ".join(
        f"{k} {v:.3f}" for k, v in record["no_gc_host_ms"].items()))
    report.append("  host us per step inside each leaf module type's forward (global hooks on):")
    for kind in sorted(types["plain"], key=lambda k: -types["plain"][k]):
        report.append(f"    {kind:24s}" + "".join(f" {label} {types[label].get(kind, 0.0):8.1f}" for label in models))
    for kind in sorted(set().union(*types.values()) - set(types["plain"])):
        report.append(f"    {kind:24s}" + "".join(f" {label} {types[label].get(kind, 0.0):8.1f}" for label in models))
    record["by_type_us"] = types
    if collector:
        report.append(f"  garbage collector ({len(gc.get_objects())} tracked objects in the process): passes per 100 "
                      "steps (gen 0/1/2), host us per step, cyclic garbage per step:")
        for label, row in collector.items():
            passes = "/".join(f"{n:.0f}" for n in row["passes_per_100_steps"])
            report.append(f"    {label:10s} {passes:>12s} {row['gc_us_per_step']:8.1f}  {row['garbage_per_step']}")
        record["gc"] = collector
    if ops:
        report.append("  each convolution called alone, plain | converted: top-level operators, launches, kernels:")
        for group in ops["groups"]:
            report.append(f"    {len(group['layers'])} layers, e.g. {group['layers'][0]}:")
            for label in ("plain", "conv"):
                if group[label] is not None:
                    op_names, launches, kernel_names = group[label]
                    report.append(f"      {label:5s} {list(op_names)} {launches} launches {list(kernel_names)}")
        record["ops"] = ops
    if layers:
        plain_us, conv_us = layers["plain"], layers["conv"]
        report.append(f"  host us per step inside each convolution's call: plain {sum(plain_us.values()):.0f}, "
                      f"conv {sum(conv_us.values()):.0f}; the layers that differ most (plain, conv, conv's route):")
        for name in sorted(conv_us, key=lambda n: -abs(conv_us[n] - plain_us.get(n, 0.0)))[:12]:
            plain_of = plain_us.get(name, 0.0)
            report.append(f"    {name:40s} {plain_of:8.1f} {conv_us[name]:8.1f}  {routes.get(name, '-')}")
        record["per_layer_us"] = {"plain": plain_us, "conv": conv_us, "routes": routes}
    plain_counts, plain_times = profiles["plain"]
    for label in [v for v in ("conv", "conv_aten") if v in profiles]:
        counts, times = profiles[label]
        diffs = sorted(set(counts) | set(plain_counts),
                       key=lambda k: -abs(times.get(k, 0) - plain_times.get(k, 0)))[:12]
        report.append(f"  kernels {label} vs plain (count, GPU us):")
        for k in diffs:
            report.append(f"    {counts.get(k, 0):4d} vs {plain_counts.get(k, 0):4d}  {times.get(k, 0):9.1f} vs "
                          f"{plain_times.get(k, 0):9.1f}  {k}")
        record["kernels"][label] = {k: [counts.get(k, 0), plain_counts.get(k, 0), times.get(k, 0),
                                        plain_times.get(k, 0)] for k in diffs}
    print("\n".join(report[first:]), flush=True)
    del models, base
    torch.cuda.empty_cache()
    return record


def main() -> None:
    global BY_TYPE, PER_LAYER, GC, OPS, VARIANTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="mobilenet_v3_large,efficientnet_b0,convnext_tiny,resnet50")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list; plain and conv always run")
    parser.add_argument("--by-type", action="store_true", help="also time each leaf module type (global hooks)")
    parser.add_argument("--per-layer", action="store_true", help="also time each convolution module's call")
    parser.add_argument("--gc", action="store_true", help="also the garbage collector's passes, time and garbage")
    parser.add_argument("--ops", action="store_true", help="also each convolution's operators and launches, alone")
    args = parser.parse_args()
    BY_TYPE, PER_LAYER, GC, OPS = args.by_type, args.per_layer, args.gc, args.ops
    VARIANTS = tuple(dict.fromkeys(("plain", "conv", *args.variants.split(","))))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, conv-core {conv_core.__version__}"]
    records = [gap(name, args.rounds, args.steps, report) for name in args.models.split(",")]
    (out / "eager_gap.json").write_text(json.dumps(records, indent=1))
    (out / "eager_gap.txt").write_text("\n".join(report) + "\n")


if __name__ == "__main__":
    main()
