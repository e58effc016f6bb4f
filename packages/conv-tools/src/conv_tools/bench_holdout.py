"""The ranking judged where nobody tuned it: layers of models in no shipped suite, beside the suites' own.

Tables and estimates are fitted on the shipped suites; a user runs other models. So this captures the
convolutions of models that are in no suite (:data:`conv_tools.bench_models.HOLDOUT_MODELS`: the
``holdout`` set) and takes the suites' layers (the ``in_sample`` set), in all three directions, and
for each problem times the kernel the engine picks and ``aten`` alone (the kernel the engine runs when
restricted to aten), both as GPU time through :func:`conv_core.timing.median_us`, as the kernel pages do.
The figure of merit is ``aten time / pick time`` (above 1: the ranking gained; below: it lost).

Each set is judged twice: with the default ranking (``CONV_CORE_BENCHMARK=0``), and in first-use
benchmark mode (``CONV_CORE_BENCHMARK=1`` with ``torch.backends.cudnn.benchmark = True``), the engine
reset before each so the setting takes effect. Models are captured on the ``meta`` device (no memory,
no kernels). Problems are deduplicated, at most ``per_model`` forward layers per model or suite are kept
(spread over the range of FLOPs), and problems are visited round-robin across models within a time
budget, so a cut-short run still covers every model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from conv_core.arch import device_arch
from conv_core.problem import DIRECTIONS, ConvProblem, torch_dtype

from . import bench_models, suites

SETS = ("holdout", "in_sample")
PHASES = ("default", "benchmark")
#: The issue's targets on held-out layers: geomean at least 1.0x aten, no layer below 0.95x (0.98x with benchmark).
FLOORS = {"default": 0.95, "benchmark": 0.98}
Log = Callable[[str], None]


@dataclass(frozen=True)
class Layer:
    """One problem to judge: which set, which model or suite it came from, its layer name and count there.

    A ``transposed`` layer's problem is its convolution's, in the direction that computes the layer's
    (:mod:`conv_tools.suites`): its forward is judged as that convolution's ``bwd_data``.
    """

    set: str
    source: str
    name: str
    count: int
    problem: ConvProblem
    transposed: bool = False

    @property
    def direction(self) -> str:
        """The layer's own direction."""
        return suites.layer_direction(self.problem.direction, self.transposed)


# ---- choosing the problems --------------------------------------------------------------------


def spread(items: list, n: int, key: Callable) -> list:
    """At most ``n`` of ``items``, evenly spaced over their order by ``key`` (smallest and largest kept)."""
    ordered = sorted(items, key=key)
    if len(ordered) <= n:
        return ordered
    if n == 1:
        return [ordered[len(ordered) // 2]]
    return [ordered[round(i * (len(ordered) - 1) / (n - 1))] for i in range(n)]


def captured_layers(model: str, *, batch: int, dtype: str) -> list[suites.SuiteLayer]:
    """Each distinct convolution of ``model`` as a suite layer (named by the first module that ran it, counted
    over all), captured on the meta device. Only the geometry is kept: layout and arch are the judge's, and
    meta kernels do not keep channels-last outputs as the GPU's do."""
    from conv_core.frontend.capture import capture_shapes

    spec = bench_models.get(model)
    net = bench_models.build(model).to(device="meta", dtype=torch_dtype(dtype)).eval()
    x = torch.empty((batch, *spec.input_shape), device="meta", dtype=torch_dtype(dtype))
    found: dict[suites.SuiteLayer, suites.SuiteLayer] = {}
    for captured in capture_shapes(net, x):
        layer = suites.SuiteLayer.from_captured(captured)
        geometry = dataclasses.replace(layer, name="", count=1)
        merged = found.get(geometry)
        found[geometry] = layer if merged is None else dataclasses.replace(merged, count=merged.count + layer.count)
    return list(found.values())


def _expand(set_name: str, source: str, layers: list[suites.SuiteLayer], batch: int, per_model: int,
            seen: set[str], **options: str) -> list[Layer]:
    """The chosen layers of one source (by their forward problems, new to ``seen``), in all three directions;
    ``options``: the problems' dtype, layout and arch."""
    forward = [(layer, layer.problem(batch, **options)) for layer in layers]
    fresh = [(layer, p) for layer, p in forward if p.key not in seen]
    chosen = spread(fresh, per_model, key=lambda item: (item[1].flops, item[1].key))
    seen.update(p.key for _, p in chosen)
    return [Layer(set_name, source, layer.name, layer.count, layer.problem(batch, direction=d, **options),
                  layer.transposed) for layer, _ in chosen for d in DIRECTIONS]


def in_sample_layers(*, dtype: str, layout: str, arch: str, per_model: int, seen: set[str]) -> list[list[Layer]]:
    """Per shipped suite, its chosen layers at the suite's own batch (the shapes the tables were fitted on)."""
    groups = []
    for name in suites.available_suites():
        suite = suites.load_suite(name)
        groups.append(_expand("in_sample", name, list(suite.layers), suite.default_batch, per_model, seen,
                              dtype=dtype, layout=layout, arch=arch))
    return groups


def holdout_layers(models: tuple[str, ...], *, batch: int, dtype: str, layout: str, arch: str, per_model: int,
                   seen: set[str]) -> list[list[Layer]]:
    """Per held-out model, its chosen layers (problems already in ``seen``, e.g. a suite's, are left out)."""
    return [_expand("holdout", model, captured_layers(model, batch=batch, dtype=dtype), batch, per_model, seen,
                    dtype=dtype, layout=layout, arch=arch) for model in models]


def round_robin(groups: list[list[Layer]]) -> list[Layer]:
    """The groups' items interleaved: first of each, then second of each, ..."""
    longest = max((len(g) for g in groups), default=0)
    return [g[i] for i in range(longest) for g in groups if i < len(g)]


# ---- judging one problem ----------------------------------------------------------------------


def judge(layer: Layer, device: torch.device, *, reps: int, warmup: int) -> dict:
    """The pick's and aten's GPU times on ``layer``'s problem, and their ratio (``aten / pick``)."""
    from conv_core.engine import get_engine
    from conv_core.reference import random_operands
    from conv_core.timing import median_us

    problem = layer.problem
    row = {"set": layer.set, "source": layer.source, "layer": layer.name, "count": layer.count,
           "problem": problem.key, "direction": layer.direction, "transposed": layer.transposed,
           "flops": problem.flops,
           "pick": None, "pick_backend": None, "pick_source": None, "aten": None,
           "pick_us": None, "aten_us": None, "ratio": None, "failed": None}
    engine = get_engine()
    try:
        pick = engine.ranking(problem, device).best
        aten = engine.ranking(problem, device, "aten").best
        row.update(pick=pick.kernel_id, pick_backend=pick.candidate.backend, pick_source=pick.source,
                   aten=aten.kernel_id)
        operands = random_operands(problem, device, seed=0)
        row["aten_us"] = median_us(functools.partial(aten.candidate.run, *operands), device, warmup=warmup, reps=reps)
        row["pick_us"] = row["aten_us"] if pick.kernel_id == aten.kernel_id else median_us(
            functools.partial(pick.candidate.run, *operands), device, warmup=warmup, reps=reps)
        row["ratio"] = row["aten_us"] / row["pick_us"]
    except Exception as exc:  # a pick that fails is the worst a ranking can do: recorded, and the run goes on
        row["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    return row


@contextlib.contextmanager
def ranking_phase(phase: str):
    """The engine as ``phase`` ranks: first-use benchmark mode on (with cuDNN's) for ``benchmark``, off for
    ``default``; conv-core is reset on the way in and out so the settings are read again. The first-use store is
    off: the benchmark judges what timing picks, so every problem is timed afresh, never read back from disk."""
    import conv_core

    changes = {"CONV_CORE_BENCHMARK": "1" if phase == "benchmark" else "0", "CONV_CORE_FIRST_USE_DIR": "off"}
    saved_env, saved_cudnn = {name: os.environ.get(name) for name in changes}, torch.backends.cudnn.benchmark
    os.environ.update(changes)
    torch.backends.cudnn.benchmark = phase == "benchmark"
    conv_core.reset()
    try:
        yield
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.backends.cudnn.benchmark = saved_cudnn
        conv_core.reset()


# ---- the run ----------------------------------------------------------------------------------


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: list[dict], floor: float, worst: int = 10) -> dict:
    """Geomean, minimum and count below ``floor`` of ``aten / pick``; per direction; picks per backend."""
    timed = [r for r in rows if r["ratio"] is not None]
    by_backend: dict[str, int] = {}
    for r in rows:
        by_backend[r["pick_backend"] or "none"] = by_backend.get(r["pick_backend"] or "none", 0) + 1
    return {
        "problems": len(rows), "timed": len(timed), "failed": sum(1 for r in rows if r["failed"]),
        "geomean": geomean([r["ratio"] for r in timed]),
        "min": min((r["ratio"] for r in timed), default=None),
        "floor": floor, "below_floor": sum(1 for r in timed if r["ratio"] < floor),
        "below_0.95": sum(1 for r in timed if r["ratio"] < 0.95),
        "by_direction": {d: geomean([r["ratio"] for r in timed if r["direction"] == d]) for d in DIRECTIONS},
        "picks_by_backend": by_backend,
        "worst": sorted(timed, key=lambda r: r["ratio"])[:worst],
    }


def run_phase(layers: list[Layer], set_name: str, phase: str, device: torch.device, *, reps: int, warmup: int,
              budget_s: float, log: Log | None = None) -> dict:
    """Judge ``layers`` (in order) in ``phase`` until ``budget_s`` is spent; rows, summary, how many were left."""
    start, rows = time.perf_counter(), []
    with ranking_phase(phase):
        for layer in layers:
            if time.perf_counter() - start > budget_s:
                break
            rows.append(judge(layer, device, reps=reps, warmup=warmup))
    elapsed = time.perf_counter() - start
    result = {"set": set_name, "phase": phase, "elapsed_s": elapsed, "truncated": len(layers) - len(rows),
              "rows": rows, "summary": summarize(rows, FLOORS[phase])}
    if log is not None:
        s = result["summary"]
        log(f"{set_name} / {phase}: {s['timed']}/{len(layers)} problems in {elapsed:.0f} s, geomean aten/pick "
            f"{_x(s['geomean'])}, min {_x(s['min'])}, {s['below_floor']} below {floor_text(phase)}")
    return result


def run_holdout(device: torch.device | str, *, models: tuple[str, ...] = bench_models.HOLDOUT_MODELS, batch: int = 8,
                dtype: str = "bfloat16", layout: str = "channels_last", per_model: int = 8,
                sets: tuple[str, ...] = SETS, phases: tuple[str, ...] = PHASES, reps: int = 10, warmup: int = 2,
                budget_s: float = 420.0, log: Log | None = None,
                checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Every (set, phase) of the module docstring within ``budget_s`` seconds; the JSON-ready record.

    ``checkpoint(record)`` is called after each phase with the record so far (``complete`` still False).
    """
    device = torch.device(device)
    arch = device_arch(device)
    seen: set[str] = set()
    chosen = {"in_sample": round_robin(in_sample_layers(dtype=dtype, layout=layout, arch=arch, per_model=per_model,
                                                        seen=seen))}
    if "holdout" in sets:
        chosen["holdout"] = round_robin(holdout_layers(models, batch=batch, dtype=dtype, layout=layout, arch=arch,
                                                       per_model=per_model, seen=seen))
    share = budget_s / max(1, len(sets) * len(phases))
    record = {"kind": "holdout", "device": str(device), "arch": arch, "batch": batch, "dtype": dtype,
              "layout": layout, "per_model": per_model, "models": list(models), "suites": suites.available_suites(),
              "reps": reps, "warmup": warmup, "budget_s": budget_s, "problems": {s: len(chosen[s]) for s in sets},
              "complete": False, "phases": []}
    for s in sets:
        for phase in phases:
            record["phases"].append(run_phase(chosen[s], s, phase, device, reps=reps, warmup=warmup, budget_s=share,
                                              log=log))
            if checkpoint is not None:
                checkpoint(record)
    record["complete"] = True
    return record


# ---- the markdown the page includes ----------------------------------------------------------------


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def floor_text(phase: str) -> str:
    return f"{FLOORS[phase]:.2f}x"


def markdown(record: dict) -> str:
    """The held-out ranking section of the benchmark page: one table of every (set, phase), the worst layers."""
    lines = [f"GPU time of the ranking's pick against aten alone (`aten / pick`, above 1 the ranking gains), "
             f"{record['dtype']} {record['layout']}, held-out models at batch {record['batch']} "
             f"({', '.join(record['models'])}), in-sample: the shipped suites at their own batch "
             f"({', '.join(record['suites'])}); at most {record['per_model']} forward layers per model or suite, "
             "in all three directions.", "",
             "| set | ranking | problems | geomean | min | below floor | fwd | bwd_data | bwd_weight | picks |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for result in record["phases"]:
        s = result["summary"]
        left = f" (+{result['truncated']} not reached)" if result["truncated"] else ""
        picks = ", ".join(f"{k} {v}" for k, v in sorted(s["picks_by_backend"].items()))
        lines.append(f"| {result['set']} | {result['phase']} | {s['timed']}{left} | {_x(s['geomean'])} | "
                     f"{_x(s['min'])} | {s['below_floor']} < {floor_text(result['phase'])} | "
                     + " | ".join(_x(s["by_direction"][d]) for d in DIRECTIONS) + f" | {picks} |")
    for result in record["phases"]:
        worst = [r for r in result["summary"]["worst"] if r["ratio"] < FLOORS[result["phase"]]]
        if worst:
            lines += ["", f"Below the floor, {result['set']} / {result['phase']}:", ""]
            lines += [f"- {r['source']} `{r['layer']}` {suites.direction_label(r['direction'], r.get('transposed'))}: "
                      f"{r['pick']} {_x(r['ratio'])} "
                      f"({r['pick_us']:.1f} us vs aten {r['aten_us']:.1f} us)" for r in worst]
    return "\n".join(lines)
