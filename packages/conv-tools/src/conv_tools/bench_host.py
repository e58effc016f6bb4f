"""Host time per call: what conv-core costs on the CPU side of a convolution, against ``F.conv2d``.

The layer (2x64x8x8, 3x3, padding 1) is so small that the GPU finishes it in a few microseconds, so a
stream of such calls is bound by the host, as much of a real model's eager run is. Each callable is
called ``calls`` times back to back from an idle device; ``host_us`` is the time to issue one call (the
loop's time before the final synchronize, divided by ``calls``) and ``wall_us`` the same with the
synchronize. Rounds of every callable are interleaved and the median round is kept.

On a GPU the calls are bfloat16 (what models run in); on the CPU float32 and bfloat16 both, since a bf16
call there takes a path of its own (:func:`conv_core.backends.aten.cpu_has_native`).

Rows: ``torch`` (``F.conv2d``), ``conv_core`` (the ranking's choice), and ``conv_core[NAME]`` for
``aten`` and every loaded plugin (``backend=NAME``; a backend with no candidate for the layer, in a
direction the row needs, is recorded as skipped with its reason). Forward (``fwd``), forward +
backward (``fwd_bwd``, both gradients through ``torch.autograd.grad``) and ``module``: a forward through
the module a converted model calls (``conv_core.nn.Conv2d``, which runs the route it keeps for the input's
signature itself), against torch's ``nn.Conv2d`` in the ``torch`` row; in both layouts.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from conv_core.frontend.call import problem_of_tensors
from conv_core.problem import DIRECTIONS, LAYOUTS

#: The layer: (batch, channels in = out, height = width, filter size); padding keeps the size.
LAYER = (2, 64, 8, 3)
WHATS = ("fwd", "fwd_bwd", "module")
TORCH = "torch"
RANKED = "conv_core"


def layer_tensors(device: torch.device, dtype: torch.dtype, layout: str, grad: bool):
    """Input, weight and output gradient of :data:`LAYER` in ``layout`` (input and weight need grad if ``grad``)."""
    n, c, size, k = LAYER
    generator = torch.Generator().manual_seed(0)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x, w, gy = (torch.randn(shape, generator=generator).to(device, dtype).contiguous(memory_format=fmt)
                for shape in ((n, c, size, size), (c, c, k, k), (n, c, size, size)))
    return x.requires_grad_(grad), w.requires_grad_(grad), gy


def _call(conv: Callable, x, w, gy, what: str) -> Callable[[], object]:
    padding = LAYER[3] // 2
    if what == "module":
        module = _module(conv, w)
        return lambda: module(x)
    if what == "fwd":
        return lambda: conv(x, w, None, 1, padding)
    return lambda: torch.autograd.grad(conv(x, w, None, 1, padding), (x, w), gy)


def _core_conv(backend: str | None) -> Callable:
    import conv_core

    return functools.partial(conv_core.conv2d, backend=backend)


def _module(conv: Callable, w: torch.Tensor) -> torch.nn.Module:
    """:data:`LAYER` as a module without bias or gradients, weight ``w``: torch's for ``F.conv2d``, else conv-core's
    with ``conv``'s backend."""
    from conv_core import nn as core_nn

    out_channels, in_channels, k, _ = w.shape
    kind = torch.nn.Conv2d if conv is F.conv2d else functools.partial(core_nn.Conv2d, **conv.keywords)
    module = kind(in_channels, out_channels, k, padding=k // 2, bias=False, device=w.device, dtype=w.dtype)
    module.weight.data = w.detach().clone()  # in w's layout, as a converted model's weights are
    return module.requires_grad_(False)


def backend_choice(x: torch.Tensor, w: torch.Tensor, what: str, backend: str | None) -> tuple[str | None, str]:
    """(the forward kernel ``backend`` runs the layer with, why it cannot) for every direction ``what`` needs."""
    from conv_core.engine import get_engine

    problem = problem_of_tensors(x.detach(), w.detach(), None, 1, LAYER[3] // 2, 1, 1)
    kernel = None
    for direction in DIRECTIONS if what == "fwd_bwd" else ("fwd",):
        try:
            best = get_engine().ranking(problem.with_direction(direction), x.device, backend).best
        except Exception as exc:  # NoCandidateError: this backend declines the layer
            return None, f"{direction}: {str(exc).splitlines()[0][:300]}"
        kernel = kernel or best.kernel_id
    return kernel, ""


def per_call_us(fns: dict[str, Callable[[], object]], device: torch.device, *, calls: int, rounds: int,
                warmup: int) -> tuple[dict[str, dict], dict[str, str]]:
    """Median host and wall microseconds per call of each function; and the failure of each that raised."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    failed: dict[str, str] = {}
    for name, fn in fns.items():
        try:
            for _ in range(warmup):
                fn()
            sync()
        except Exception as exc:  # a backend that fails on the layer is a finding, not the end of the run
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    samples = {name: ([], []) for name in fns if name not in failed}
    for _ in range(rounds):
        for name, (host, wall) in samples.items():
            fn = fns[name]
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            issued = time.perf_counter()
            sync()
            host.append((issued - start) * 1e6 / calls)
            wall.append((time.perf_counter() - start) * 1e6 / calls)
    return ({name: {"host_us": statistics.median(h), "wall_us": statistics.median(w)}
             for name, (h, w) in samples.items()}, failed)


def default_dtypes(device: torch.device) -> tuple[torch.dtype, ...]:
    """bfloat16 on a GPU (what models run in); on the CPU float32 and bfloat16, whose calls take other paths."""
    return (torch.bfloat16,) if device.type == "cuda" else (torch.float32, torch.bfloat16)


def plugin_names() -> list[str]:
    """aten and every loaded plugin, in the registry's order."""
    from conv_core.engine import get_engine

    return [b.name for b in get_engine().registry.active()]


def run_host_bench(device: torch.device | str, *, dtypes: tuple[torch.dtype, ...] | None = None,
                   layouts: tuple[str, ...] = LAYOUTS, whats: tuple[str, ...] = WHATS, calls: int = 100,
                   rounds: int = 20, warmup: int = 5) -> dict:
    """Every row of the module docstring, as a JSON-ready record (without its stamp)."""
    device = torch.device(device)
    dtypes = dtypes or default_dtypes(device)
    rows = []
    for dtype, layout, what in ((d, layout, what) for d in dtypes for layout in layouts for what in whats):
        x, w, gy = layer_tensors(device, dtype, layout, grad=what == "fwd_bwd")
        fns = {TORCH: _call(F.conv2d, x, w, gy, what)}
        entries = {TORCH: {"backend": None, "kernel": None, "skipped": None}}
        for backend in (None, *plugin_names()):
            label = RANKED if backend is None else f"{RANKED}[{backend}]"
            kernel, why = backend_choice(x, w, "fwd" if what == "module" else what, backend)
            entries[label] = {"backend": backend, "kernel": kernel, "skipped": why or None}
            if kernel is not None:
                fns[label] = _call(_core_conv(backend), x, w, gy, what)
        times, failed = per_call_us(fns, device, calls=calls, rounds=rounds, warmup=warmup)
        base = times.get(TORCH, {}).get("host_us")
        for label, entry in entries.items():
            measured = times.get(label, {"host_us": None, "wall_us": None})
            ratio = measured["host_us"] / base if base and measured["host_us"] else None
            rows.append({"dtype": str(dtype).removeprefix("torch."), "layout": layout, "what": what, "label": label,
                         **entry, **measured, "ratio": ratio, "failed": failed.get(label)})
    n, c, size, k = LAYER
    return {"kind": "host", "device": str(device), "dtype": ",".join(str(d).removeprefix("torch.") for d in dtypes),
            "layer": f"n{n} c{c} k{c} i{size}x{size} f{k}x{k} s1 p{k // 2}", "calls": calls, "rounds": rounds,
            "warmup": warmup, "rows": rows}
