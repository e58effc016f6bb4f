"""Where a converted model loses time: each convolution's host and GPU time plain and converted, and the rest.

The real-model benchmark (:mod:`conv_tools.model_bench`) says *whether* a converted model is slower; this says
*where*. Both variants run the same steps under ``torch.profiler`` in one process, and every convolution module
(``torch.nn.Conv*d`` or conv-core's, transposed ones too) is wrapped in a ``record_function`` range named after
it, so

- a layer's **forward** is its range: host time (the range's CPU time) and GPU time (the kernels launched inside
  it);
- a layer's **backward** is the autograd nodes its forward created: the profiler stamps each op that records a
  node with a sequence number, and the backward pass's ``evaluate_function`` events carry the same number;
- everything else (a batch norm, a ``cat``, a layout copy, the optimizer) is grouped by op name, top-level ops
  only, so that a copy the converted model adds shows up as a row of its own.

The profiler ties a GPU kernel to the op that launched it through the CUDA runtime's launch calls; Triton
launches through the driver's API, so a plugin kernel's GPU time counts in the variant's total but in no layer
(``unattributed_gpu_us``): a plugin layer's row shows its host time, and its GPU time is that remainder.

Each layer also says its layout in and out and, for the converted model, the kernel ranked first in each
direction and whether its route is *direct* (``F.conv*d`` itself) or through the engine. The profiler costs
host time of its own, alike in both variants: compare the variants with each other, never with the timed
benchmark's milliseconds.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from conv_core.frontend.call_cache import calls
from conv_core.layout import detect_layout
from conv_core.problem import torch_dtype
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from . import bench_models
from .model_bench import ModelBenchConfig, cast_input, cudnn_benchmark, make_variants, weights_dtype
from .model_bench_modes import prepare

#: The benchmark modes a model is profiled in: those that call the module eagerly.
ATTRIBUTED_MODES = ("eager", "train", "amp_train")
#: Prefix of the profiler range around one convolution module's call.
LAYER_RANGE = "conv_core.layer:"
#: Prefix of the autograd engine's event for one backward node.
BACKWARD_EVENT = "autograd::engine::evaluate_function: "
_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def convolution_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every convolution module of ``model`` (conv-core's subclass torch's)."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, _CONVOLUTIONS)]


@contextlib.contextmanager
def layer_ranges(model: nn.Module, layouts: dict[str, tuple[str, str]] | None = None) -> Iterator[None]:
    """Every convolution module's call inside a profiler range named ``LAYER_RANGE + name`` for the block;
    ``layouts`` (if given) gets each layer's ``(input layout, output layout)``."""
    handles, open_ranges = [], {}

    def enter(name):
        def pre(_module, args):
            if layouts is not None and args and isinstance(args[0], torch.Tensor):
                layouts[name] = (detect_layout(args[0]), "")
            rf = record_function(LAYER_RANGE + name)
            rf.__enter__()
            open_ranges[name] = rf
        return pre

    def leave(name):
        def post(_module, _args, output):
            open_ranges.pop(name).__exit__(None, None, None)
            if layouts is not None and isinstance(output, torch.Tensor) and name in layouts:
                layouts[name] = (layouts[name][0], detect_layout(output))
        return post

    for name, module in convolution_modules(model):
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave(name)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for rf in open_ranges.values():  # a step that raised inside a layer
            rf.__exit__(None, None, None)


def _gpu_us(event) -> float:
    """The event's GPU time with its children's (``device_time_total``; ``cuda_time_total`` before torch 2.4)."""
    name = "device_time_total" if hasattr(type(event), "device_time_total") else "cuda_time_total"
    return float(getattr(event, name, 0.0) or 0.0)


def _descendants(event) -> Iterator:
    for child in event.cpu_children:
        yield child
        yield from _descendants(child)


def _top_level(events) -> list:
    return [e for e in events if e.cpu_parent is None and e.device_type == torch.autograd.DeviceType.CPU]


def split_profile(events, steps: int) -> dict:
    """Per-layer forward and backward times and the other top-level ops' times, per step, from profiler
    ``events`` of ``steps`` steps: ``{"layers": {name: {...}}, "outside": {op: {...}}, "gpu_total_us": ...}``."""
    layers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    owner: dict[int, str] = {}  # sequence number -> layer whose forward recorded the node
    top = _top_level(events)
    for event in top:
        if event.name.startswith(LAYER_RANGE):
            name = event.name[len(LAYER_RANGE):]
            layers[name]["calls"] += 1 / steps
            layers[name]["fwd_host_us"] += event.cpu_time_total / steps
            layers[name]["fwd_gpu_us"] += _gpu_us(event) / steps
            for child in _descendants(event):
                if child.sequence_nr >= 0:
                    owner.setdefault(child.sequence_nr, name)
    outside: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in top:
        if event.name.startswith(LAYER_RANGE) or event.name.startswith("ProfilerStep"):
            continue
        layer = owner.get(event.sequence_nr) if event.name.startswith(BACKWARD_EVENT) else None
        if layer is not None:
            layers[layer]["bwd_host_us"] += event.cpu_time_total / steps
            layers[layer]["bwd_gpu_us"] += _gpu_us(event) / steps
            continue
        row = outside[event.name.removeprefix(BACKWARD_EVENT)]
        row["count"] += 1 / steps
        row["host_us"] += event.cpu_time_total / steps
        row["gpu_us"] += _gpu_us(event) / steps
    kernels = [e for e in events if e.device_type != torch.autograd.DeviceType.CPU]
    gpu_total = sum(e.time_range.elapsed_us() for e in kernels) / steps
    return {"layers": {k: dict(v) for k, v in layers.items()}, "outside": {k: dict(v) for k, v in outside.items()},
            "gpu_total_us": gpu_total}


def profile_steps(step: Callable[[], object], model: nn.Module, device: torch.device, *, warmup: int = 2,
                  steps: int = 3) -> tuple[dict, dict[str, tuple[str, str]]]:
    """``step`` run ``warmup`` then ``steps`` times under the profiler, convolution modules in ranges: the
    :func:`split_profile` of it and each layer's layouts."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    layouts: dict[str, tuple[str, str]] = {}
    with layer_ranges(model, layouts):
        for _ in range(warmup):
            step()
        _sync(device)
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            _sync(device)
    return split_profile(prof.events(), steps), layouts


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- joining the variants ---------------------------------------------------------------------------------


_TIMES = ("fwd_host_us", "fwd_gpu_us", "bwd_host_us", "bwd_gpu_us")


def _times(row: dict | None) -> dict[str, float]:
    return {k: round((row or {}).get(k, 0.0), 2) for k in _TIMES}


def join(splits: dict[str, dict], layouts: dict[str, dict[str, tuple[str, str]]], picks: dict | None) -> dict:
    """One attribution record from each variant's :func:`split_profile` (``plain``, ``conv`` and, in inference,
    ``fused``, whose convolutions run inside their chains and so count among the other ops): layers in the
    model's order with their times plain and converted, the other ops with each variant's, and totals."""
    plain, conv = splits["plain"], splits["conv"]
    by_module = _picks_by_module(picks)
    layer_rows = []
    for name in dict.fromkeys([*plain["layers"], *conv["layers"]]):
        layer_rows.append({"module": name, "layout_plain": list(layouts["plain"].get(name, ("", ""))),
                           "layout_conv": list(layouts["conv"].get(name, ("", ""))),
                           "plain": _times(plain["layers"].get(name)), "conv": _times(conv["layers"].get(name)),
                           "calls": round(conv["layers"].get(name, {}).get("calls", 0.0), 2),
                           **by_module.get(name, {})})
    outside_rows = []
    for op in dict.fromkeys(op for split in splits.values() for op in split["outside"]):
        outside_rows.append({"op": op, **{f"{k}_{variant}": round(split["outside"].get(op, {}).get(k, 0.0), 2)
                                          for variant, split in splits.items()
                                          for k in ("count", "host_us", "gpu_us")}})
    outside_rows.sort(key=lambda row: -max(_change(row, variant) for variant in splits))
    return {"layers": layer_rows, "outside": outside_rows,
            "totals": {variant: _totals(split) for variant, split in splits.items()}}


def _change(row: dict, variant: str) -> float:
    """How far an op's host and GPU time moved from plain's in ``variant``."""
    return sum(abs(row[f"{k}_{variant}"] - row[f"{k}_plain"]) for k in ("host_us", "gpu_us"))


def _totals(split: dict) -> dict[str, float]:
    layers = split["layers"].values()
    totals = {k: round(sum(row.get(k, 0.0) for row in layers), 1) for k in _TIMES}
    totals["outside_host_us"] = round(sum(r["host_us"] for r in split["outside"].values()), 1)
    totals["outside_gpu_us"] = round(sum(r["gpu_us"] for r in split["outside"].values()), 1)
    totals["gpu_total_us"] = round(split["gpu_total_us"], 1)
    # Kernels the profiler could not tie to the op that launched them: Triton's, launched through the driver's
    # API, which the profiler's correlation misses. They are the plugins' kernels of the layers routed to them.
    attributed = sum(totals[k] for k in ("fwd_gpu_us", "bwd_gpu_us", "outside_gpu_us"))
    totals["unattributed_gpu_us"] = round(max(0.0, totals["gpu_total_us"] - attributed), 1)
    return totals


def _picks_by_module(picks: dict | None) -> dict[str, dict]:
    """Module name -> its problem's kernel per direction, from :func:`conv_tools.model_bench.picks`' rows."""
    found = {}
    for row in (picks or {}).get("layers", []):
        facts = {k: row[k] for k in ("problem", "fwd", "bwd_data", "bwd_weight", "route") if k in row}
        for module in row.get("modules", [row.get("module")]):
            found[module] = facts
    return found


# ---- reading one ------------------------------------------------------------------------------------------


def worst_layers(record: dict, count: int = 8) -> list[dict]:
    """The layers whose converted host + GPU time (forward and backward) grew the most over plain's."""
    def growth(row):
        return sum(row["conv"][k] - row["plain"][k] for k in _TIMES)

    rows = sorted(record["layers"], key=growth, reverse=True)
    return [dict(row, growth_us=round(growth(row), 1)) for row in rows[:count] if growth(row) > 0]


def describe(record: dict, count: int = 8) -> list[str]:
    """Lines a person reads: totals plain and converted, the layers that lost most, the other ops that grew."""
    lines = []
    for variant, t in record["totals"].items():
        lines.append(f"  {variant}: convolutions fwd host {t['fwd_host_us']:.0f} us gpu {t['fwd_gpu_us']:.0f} us, "
                     f"bwd host {t['bwd_host_us']:.0f} us gpu {t['bwd_gpu_us']:.0f} us; other ops host "
                     f"{t['outside_host_us']:.0f} us gpu {t['outside_gpu_us']:.0f} us; all kernels "
                     f"{t['gpu_total_us']:.0f} us ({t['unattributed_gpu_us']:.0f} us of plugin kernels the profiler "
                     "ties to no layer)")
    for row in worst_layers(record, count):
        lines.append(f"  layer {row['module']}: +{row['growth_us']:.0f} us ({row.get('fwd', '?')}, "
                     f"route {row.get('route', '?')}, layout {'->'.join(row['layout_conv'])}): "
                     + ", ".join(f"{k} {row['plain'][k]:.0f}->{row['conv'][k]:.0f}" for k in _TIMES))
    variants = list(record["totals"])
    for row in record["outside"][:count]:
        lines.append(f"  op {row['op']}: " + "; ".join(
            f"{v} count {row[f'count_{v}']:.0f} host {row[f'host_us_{v}']:.0f} us gpu {row[f'gpu_us_{v}']:.0f} us"
            for v in variants))
    return lines


# ---- one mode of one model ------------------------------------------------------------------------------


def route_kinds() -> dict[str, str]:
    """Problem key -> ``direct`` or ``engine``, for every route the engine decided so far."""
    return {route.problem.key: "direct" if route.direct else "engine"
            for route in calls().routes() if hasattr(route, "problem")}


def attribute_mode(mode: str, base: nn.Module, x: torch.Tensor, config, picks: dict | None = None, *,
                   steps: int = 3) -> dict:
    """The attribution record of ``base`` in ``mode`` (one of :data:`ATTRIBUTED_MODES`): each variant prepared as
    the benchmark prepares it (:func:`conv_tools.model_bench_modes.prepare`), profiled in turn."""
    xin = cast_input(x, weights_dtype(mode, config), config.layout)
    splits, layouts = {}, {}
    for name, build in make_variants(base, mode, config).items():
        runner = prepare(mode, build(), xin, amp_dtype=torch_dtype(config.amp_dtype),
                         compile_backend=config.compile_backend)
        splits[name], layouts[name] = profile_steps(runner.step, runner.module, x.device, steps=steps)
        del runner
    record = join(splits, layouts, picks)
    kinds = route_kinds()
    for row in record["layers"]:
        if "problem" in row:
            row["route"] = kinds.get(row["problem"], "?")
    return {"mode": mode, **record}



def attribute_model(config: ModelBenchConfig, picks: dict | None,
                    log: Callable[[str], None] | None = None) -> list[dict]:
    """:func:`attribute_mode` of each of ``config``'s modes in :data:`ATTRIBUTED_MODES` (``conv-core bench --model
    NAME --attribute``), on the model and input the benchmark builds from ``config`` (same seed), with
    ``cudnn.benchmark`` on as there; ``picks``: the benchmark record's ``picks["conv"]``."""
    spec = bench_models.get(config.model)
    device = torch.device(config.device)
    base = bench_models.build(config.model, config.seed).to(device)
    x = spec.example(config.batch or spec.default_batch, device, config.seed)
    records = []
    with cudnn_benchmark():
        for mode in (m for m in config.modes if m in ATTRIBUTED_MODES):
            try:
                records.append(attribute_mode(mode, base, x, config, picks))
            except Exception as exc:  # the timed figures stand without it
                records.append({"mode": mode, "failed": f"{type(exc).__name__}: {str(exc)[:400]}"})
                continue
            if log is not None:
                log("\n".join([f"{config.model} {mode}: where the time goes", *describe(records[-1], 5)]))
    return records


# ---- on the benchmark page --------------------------------------------------------------------------------


def page_lines(title: str, record: dict, count: int = 5) -> list[str]:
    """A page's subsection for one model and mode: totals per variant, the layers that grew most, the other ops
    that moved most (microseconds per step, from the profiled steps)."""
    variants = list(record["totals"])
    lines = [f"### {title}", "", "| per step | " + " | ".join(variants) + " |",
             "| --- |" + " ---: |" * len(variants)]
    for key, label in (("fwd_host_us", "convolutions, forward: host"), ("fwd_gpu_us", "convolutions, forward: GPU"),
                       ("bwd_host_us", "convolutions, backward: host"), ("bwd_gpu_us", "convolutions, backward: GPU"),
                       ("outside_host_us", "other ops: host"), ("outside_gpu_us", "other ops: GPU"),
                       ("unattributed_gpu_us", "plugin kernels (GPU, no layer)"), ("gpu_total_us", "all kernels")):
        lines.append(f"| {label} | " + " | ".join(f"{record['totals'][v].get(key, 0):.0f}" for v in variants) + " |")
    worst = worst_layers(record, count)
    if worst:
        lines += ["", "| layer | kernel (fwd / bwd_data / bwd_weight) | route | host fwd, bwd plain -> conv | "
                  "grew (us) |", "| --- | --- | --- | --- | ---: |"]
        for row in worst:
            kernels = " / ".join(str(row.get(d, "?")) for d in ("fwd", "bwd_data", "bwd_weight"))
            host = (f"{row['plain']['fwd_host_us']:.0f}, {row['plain']['bwd_host_us']:.0f} -> "
                    f"{row['conv']['fwd_host_us']:.0f}, {row['conv']['bwd_host_us']:.0f}")
            lines.append(f"| {row['module']} | {kernels} | {row.get('route', '?')} | {host} | "
                         f"{row['growth_us']:.0f} |")
    ops = record["outside"][:count]
    if ops:
        lines += ["", "| other op | " + " | ".join(f"{v}: count, host, GPU us" for v in variants) + " |",
                  "| --- |" + " --- |" * len(variants)]
        for row in ops:
            lines.append(f"| {row['op']} | " + " | ".join(
                f"{row[f'count_{v}']:.0f}, {row[f'host_us_{v}']:.0f}, {row[f'gpu_us_{v}']:.0f}" for v in variants)
                + " |")
    return lines
