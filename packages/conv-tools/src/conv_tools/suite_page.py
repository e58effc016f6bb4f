"""A backend's benchmark page from suite runs: ``conv-core tables report --backend NAME INPUT... --out PAGE.md``.

For every suite, direction and layout the page takes the latest run that measured it
(:func:`conv_tools.bench_runs.latest`) and shows, per layer, aten (cuDNN), the backend's fastest
candidate, what the ranking picked, and the two roofline times (FLOPs over the matmul rate, bytes
over the copy rate) that say whether the layer is bound by arithmetic or by memory. Issue 3's targets
(:class:`Targets`) are checked and each verdict printed with its numbers. "Few-channel" layers are the
memory-bound ones with at most ``few_channels`` channels on one side: the RGB stem, the 3-channel image
output, the small-K detection heads. The page names the command that regenerates it and, for each
run it shows, the date, GPU, versions and the command of the run; nothing on it is typed by hand.
A transposed layer (``seg_head_transposed``) runs as its convolution's problem in another direction, so
its row names the layer's own direction beside it (``unet.up1.up, fwd (transposed)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conv_core.estimate import roofline_us
from conv_core.problem import ConvProblem
from conv_core.frontend.transposed import direction_label

from .bench_runs import Run, latest


@dataclass(frozen=True)
class Targets:
    """Issue 3's targets for a plugin against aten (cuDNN)."""

    memory: float = 2.0  # few-channel memory-bound layers, each
    nchw: float = 1.3  # channels-first layers, geomean
    compute: float = 0.8  # compute-bound channels-last layers, geomean, the backend alone
    ranking_slack: float = 0.05  # through the ranking, no layer slower than aten by more than this
    few_channels: int = 36


@dataclass(frozen=True)
class NewKindTargets:
    """Issue 24's targets for the layers the first suites lacked, through the ranking (the pick against
    PyTorch: ``F.conv_transpose*d`` / ``F.conv3d`` where the bench timed it, else aten)."""

    transposed: float = 1.2  # transposed layers' forward, geomean
    three_d: float = 1.2  # 3D layers' forward, geomean
    grouped: float = 1.0  # grouped 3x3 layers of 4-64 channels per group, every direction, geomean
    group_widths: tuple[int, int] = (4, 64)


#: The suites issue 3's targets are judged on; a page holding others judges those by :class:`NewKindTargets`.
ISSUE3_SUITES = ("resnet50", "sd_vae_decoder", "retinanet_head")
_DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")


def suite_of(stem: str) -> str:
    """The suite of a bench file's stem ``<suite>_<direction>_<layout>``."""
    rest = stem.rsplit("_", 1)[0]
    for direction in _DIRECTIONS:
        if rest.endswith("_" + direction):
            return rest[: -len(direction) - 1]
    return rest


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else \
        f"{value:.{digits}f}{suffix}"


def backend_best(row: dict, backend: str) -> tuple[str | None, float | None]:
    """The backend's fastest measured candidate on this layer."""
    mine = [m for m in row["measurements"] if m["kernel"].startswith(backend + ":") and m["us"]]
    if not mine:
        return None, None
    best = min(mine, key=lambda m: m["us"])
    return best["kernel"], best["us"]


def layer_facts(row: dict, backend: str) -> dict:
    """One layer's figures: aten, the backend's best, the pick, the roofline floors."""
    problem = ConvProblem.from_key(row["problem"])
    compute_us, memory_us = roofline_us(problem)
    kernel, us = backend_best(row, backend)
    aten = row["aten_us"]
    transposed = row.get("transposed", False)
    torch_us = row.get("torch_us") or aten
    g = problem.groups
    return {"layer": row["layer"], "shape": row["shape"], "direction": direction_label(row["direction"], transposed),
            "transposed": transposed, "layout": problem.layout, "forward": row["direction"] == "fwd",
            "ndim": problem.ndim, "three_by_three": all(k == 3 for k in problem.filter_size),
            "group_width": min(problem.in_channels, problem.out_channels) // g
            if 1 < g < problem.in_channels else 0,
            "picked_vs_torch": torch_us / row["picked_us"] if row["picked_us"] else None,
            "aten_us": aten, "kernel": kernel, "us": us, "speedup": aten / us if us else None,
            "picked": row["picked"], "picked_us": row["picked_us"],
            "picked_speedup": aten / row["picked_us"] if row["picked_us"] else None,
            "picked_fastest": row["picked"] == row["fastest"], "picked_over_fastest": row["picked_over_fastest"],
            "compute_us": compute_us, "memory_us": memory_us, "memory_bound": memory_us >= compute_us,
            "channels": min(problem.in_channels, problem.out_channels)}


def layer_table(facts: list[dict]) -> list[str]:
    lines = ["| layer | shape | bound | floor us (flops / bytes) | aten us | best kernel | us | speedup | picked | "
             "picked vs aten |", "|" + " --- |" * 10]
    for f in facts:
        layer = f"{f['layer']}, {f['direction']}" if f["transposed"] else f["layer"]
        lines.append(f"| {layer} | {f['shape']} | {'memory' if f['memory_bound'] else 'compute'} | "
                     f"{fmt(f['compute_us'], 1)} / {fmt(f['memory_us'], 1)} | {fmt(f['aten_us'], 1)} | "
                     f"{f['kernel'] or '-'} | {fmt(f['us'], 1)} | {fmt(f['speedup'], 2, 'x')} | {f['picked']} | "
                     f"{fmt(f['picked_speedup'], 2, 'x')} |")
    return lines


def _misses(facts: list[dict], key: str) -> str:
    return "; ".join(f"{f['layer']} {f['direction']} {f['layout']} {fmt(f[key], 2, 'x')}" for f in facts)


def _verdict(value: float, target: float) -> str:
    return "not measured" if not math.isfinite(value) else "met" if value >= target else "missed"


def verdicts(facts: list[dict], targets: Targets = Targets()) -> list[str]:
    """The four targets, each with the numbers behind it, then the ranking's accuracy."""
    out = []
    memory = [f for f in facts if f["memory_bound"] and f["channels"] <= targets.few_channels]
    low = [f for f in memory if (f["speedup"] or 0) < targets.memory]
    out.append(f"- few-channel memory-bound layers at >= {targets.memory}x aten: {len(memory) - len(low)}/"
               f"{len(memory)}" + (f" (misses: {_misses(low, 'speedup')})" if low else ""))
    g = geomean([f["speedup"] for f in facts if f["layout"] == "channels_first"])
    n = sum(f["layout"] == "channels_first" for f in facts)
    out.append(f"- channels-first geomean vs aten: {fmt(g, 2, 'x')} over {n} layers "
               f"(target {targets.nchw}x): {_verdict(g, targets.nchw)}")
    compute = [f["speedup"] for f in facts if f["layout"] == "channels_last" and not f["memory_bound"]]
    g = geomean(compute)
    out.append(f"- compute-bound channels-last geomean vs aten, this backend alone: {fmt(g, 2, 'x')} over "
               f"{len(compute)} layers (target {targets.compute}x): {_verdict(g, targets.compute)}")
    slow = [f for f in facts if (f["picked_speedup"] or 0) < 1 - targets.ranking_slack]
    out.append(f"- through the ranking (this backend + aten), layers slower than aten by more than "
               f"{targets.ranking_slack:.0%}: {len(slow)}/{len(facts)}"
               + (f" ({_misses(slow, 'picked_speedup')})" if slow else ""))
    hits = sum(f["picked_fastest"] for f in facts)
    out.append(f"- the ranking's first choice was the fastest measured candidate on {hits}/{len(facts)} layers; "
               f"geomean time chosen / fastest: {fmt(geomean([f['picked_over_fastest'] for f in facts]), 3)}")
    return out


def _geomean_verdict(what: str, facts: list[dict], key: str, target: float) -> str:
    g = geomean([f[key] for f in facts])
    return f"- {what}: {fmt(g, 3, 'x')} over {len(facts)} layers (target {target}x): {_verdict(g, target)}"


def new_kind_verdicts(facts: list[dict], targets: NewKindTargets = NewKindTargets()) -> list[str]:
    """Issue 24's targets, each with the numbers behind it, and the 3D layers' gradients for the record."""
    three_d = [f for f in facts if f["ndim"] == 3]
    lo, hi = targets.group_widths
    grouped = [f for f in facts if f["three_by_three"] and lo <= f["group_width"] <= hi]
    return [
        _geomean_verdict("transposed layers' forward, picked vs `F.conv_transpose*d`",
                         [f for f in facts if f["transposed"] and f["forward"]], "picked_vs_torch", targets.transposed),
        _geomean_verdict("3D layers' forward, picked vs `F.conv3d`", [f for f in three_d if f["forward"]],
                         "picked_vs_torch", targets.three_d),
        f"- 3D layers' gradients, picked vs aten (no target): "
        f"{fmt(geomean([f['picked_speedup'] for f in three_d if not f['forward']]), 3, 'x')}",
        _geomean_verdict(f"grouped 3x3 layers of {lo}-{hi} channels per group, every direction, picked vs aten",
                         grouped, "picked_speedup", targets.grouped),
    ]


def runs_section(used: list[Run]) -> list[str]:
    """Where each run shown was made: date, GPU, versions, command."""
    lines = ["## Runs", ""]
    for run in used:
        versions = ", ".join([*([run.software] if run.software else []),
                              *(f"{k} {v}" for k, v in sorted(run.versions.items()))])
        log = f" (log #{run.log})" if run.log else ""
        lines += [f"- **{run.name}**{log}: {run.date or 'date unknown'}, {run.gpu or 'GPU unknown'}; {versions}",
                  f"  - command: `{run.command or 'unknown'}`"]
    return lines + [""]


def measured_line(runs: list[Run]) -> str:
    """The page's first fact: when and on which GPU its figures were measured (each run's details below)."""
    dates = sorted(run.date[:10] for run in runs if run.date)
    span = "date unknown" if not dates else dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    gpus = sorted({run.gpu for run in runs if run.gpu}) or ["GPU unknown"]
    return f"Measured {span} on {' and '.join(gpus)} ({len(runs)} run{'s' if len(runs) != 1 else ''}, listed below)."


def render(runs: list[Run], backend: str, title: str, regenerate: str, targets: Targets = Targets()) -> str:
    """The page: the command that regenerates it, the current figures per suite/direction/layout, the
    targets, the runs, then every layer."""
    chosen = latest(runs)
    used = sorted({id(run): run for _, run in chosen}.values(), key=lambda run: (run.date or "", run.name))
    facts = {stem: [layer_facts(row, backend) for row in run.files[stem]["rows"]] for stem, run in chosen}
    lines = [f"# {title}", "", measured_line(used), "", f"Regenerate: `{regenerate}`", "",
             "Speed is `aten (cuDNN) time / kernel time` measured in the same run (above 1: faster than cuDNN); "
             "each suite, direction and layout from the latest run that measured it.", "",
             "## Current figures", "", "| suite, direction, layout | layers | picked vs aten (geomean) | "
             f"best {backend} kernel vs aten (geomean) | run |", "| --- | --- | --- | --- | --- |"]
    for stem, run in chosen:
        f = facts[stem]
        lines.append(f"| {stem} | {len(f)} | {fmt(geomean([x['picked_speedup'] for x in f]), 3, 'x')} | "
                     f"{fmt(geomean([x['speedup'] for x in f]), 3, 'x')} | {run.name} |")
    first = [x for stem, f in facts.items() if suite_of(stem) in ISSUE3_SUITES for x in f]
    others = [x for stem, f in facts.items() if suite_of(stem) not in ISSUE3_SUITES for x in f]
    lines += ["", "## Targets"]
    if first:
        lines += ["", f"Issue 3's, on {', '.join(ISSUE3_SUITES)}:", "", *verdicts(first, targets)]
    if others:
        lines += ["", "Issue 24's, on the suites it added:", "", *new_kind_verdicts(others),
                  *verdicts(others, targets)[3:]]  # the ranking's lines
    lines += ["", *runs_section(used)]
    for stem, run in chosen:
        data = run.files[stem]
        lines += [f"## {stem}", "", f"{run.name}: {data['device_name']}, {data['reps']} repetitions, median.", ""]
        lines += layer_table(facts[stem]) + [""]
    return "\n".join(lines)


def chart(runs: list[Run], path: str, title: str) -> None:
    """The latest runs' layers as ``conv_tools.chart.bar_chart`` draws bench rows (their JSON fields suffice)."""
    from types import SimpleNamespace

    from .chart import bar_chart

    rows = [SimpleNamespace(layer=f"{stem.split('_')[0]}:{row['layer'][:28]}",
                            direction_label=direction_label(row["direction"], row.get("transposed", False)),
                            pick_speedup=row["pick_speedup"],
                            speedup=row["speedup"], aten_us=row["aten_us"], torch_us=row["torch_us"])
            for stem, run in latest(runs) for row in run.files[stem]["rows"]]
    bar_chart(rows, path, title=title)
