"""Turn ``conv-core bench --json`` files into a benchmark page that judges a backend's targets.

Each input file is one suite in one direction and layout. For every layer the
page shows aten (cuDNN), the backend's fastest candidate, what the ranking
picked, and the two roofline times (FLOPs over the measured matmul rate,
bytes over the measured copy rate) that say whether the layer is bound by
arithmetic or by memory. The targets (issue 3's, the defaults below) are
checked and each verdict is printed with its numbers. "Few-channel" layers
are the memory-bound ones with at most ``--few-channels`` channels on one
side: the RGB stem, the 3-channel image output, the small-K detection heads.

``--png PATH`` also draws the layers' speedups over aten (the ranking's pick and the fastest candidate) as a
bar chart (``conv_core.chart``; needs matplotlib).

Usage: python3 scripts/bench_report.py --backend rdna --title "..." --out PAGE.md [--png CHART.png] BENCH.json...
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from types import SimpleNamespace

from conv_core.estimate import roofline_us
from conv_core.problem import ConvProblem


def geomean(values) -> float:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def backend_best(row: dict, backend: str) -> tuple[str | None, float | None]:
    """The backend's fastest measured candidate on this layer."""
    mine = [m for m in row["measurements"] if m["kernel"].startswith(backend + ":") and m["us"]]
    if not mine:
        return None, None
    best = min(mine, key=lambda m: m["us"])
    return best["kernel"], best["us"]


def layer_facts(row: dict, backend: str) -> dict:
    problem = ConvProblem.from_key(row["problem"])
    compute_us, memory_us = roofline_us(problem)
    kernel, us = backend_best(row, backend)
    aten = row["aten_us"]
    return {"layer": row["layer"], "shape": row["shape"], "direction": row["direction"], "layout": problem.layout,
            "aten_us": aten, "kernel": kernel, "us": us, "speedup": aten / us if us else None,
            "picked": row["picked"], "picked_us": row["picked_us"],
            "picked_speedup": aten / row["picked_us"] if row["picked_us"] else None,
            "picked_fastest": row["picked"] == row["fastest"], "picked_over_fastest": row["picked_over_fastest"],
            "compute_us": compute_us, "memory_us": memory_us, "memory_bound": memory_us >= compute_us,
            "channels": min(problem.in_channels, problem.out_channels)}


def fmt(value, digits=2, suffix="") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else \
        f"{value:.{digits}f}{suffix}"


def table(facts: list[dict]) -> list[str]:
    lines = ["| layer | shape | bound | floor us (flops / bytes) | aten us | best kernel | us | speedup | picked | "
             "picked vs aten |", "|" + " --- |" * 10]
    for f in facts:
        lines.append(f"| {f['layer']} | {f['shape']} | {'memory' if f['memory_bound'] else 'compute'} | "
                     f"{fmt(f['compute_us'], 1)} / {fmt(f['memory_us'], 1)} | {fmt(f['aten_us'], 1)} | "
                     f"{f['kernel'] or '-'} | {fmt(f['us'], 1)} | {fmt(f['speedup'], 2, 'x')} | {f['picked']} | "
                     f"{fmt(f['picked_speedup'], 2, 'x')} |")
    return lines


def ranking_accuracy(facts: list[dict]) -> str:
    """How well the ranking's first choice matches the fastest measured candidate (the issue asks for both)."""
    hits = sum(f["picked_fastest"] for f in facts)
    ratio = geomean([f["picked_over_fastest"] for f in facts])
    return (f"- the ranking's first choice was the fastest measured candidate on {hits}/{len(facts)} layers; "
            f"geomean time chosen / fastest: {fmt(ratio, 3)}")


def verdicts(facts: list[dict], args) -> list[str]:
    """The four targets, each with the numbers behind it, then the ranking's accuracy."""
    out = []
    memory = [f for f in facts if f["memory_bound"] and f["channels"] <= args.few_channels]
    low = [f for f in memory if (f["speedup"] or 0) < args.memory_target]
    out.append(f"- few-channel memory-bound layers at >= {args.memory_target}x aten: {len(memory) - len(low)}/"
               f"{len(memory)}"
               + (" (misses: " + "; ".join(f"{f['layer']} {f['direction']} {f['layout']} "
                                            f"{fmt(f['speedup'], 2, 'x')}" for f in low) + ")" if low else ""))
    first = [f["speedup"] for f in facts if f["layout"] == "channels_first"]
    g = geomean(first)
    out.append(f"- channels-first geomean vs aten: {fmt(g, 2, 'x')} over {len(first)} layers "
               f"(target {args.nchw_target}x): {'met' if g >= args.nchw_target else 'missed'}")
    compute = [f["speedup"] for f in facts if f["layout"] == "channels_last" and not f["memory_bound"]]
    g = geomean(compute)
    verdict = "met" if g >= args.compute_target else "missed"
    out.append(f"- compute-bound channels-last geomean vs aten, this backend alone: {fmt(g, 2, 'x')} over "
               f"{len(compute)} layers (target {args.compute_target}x): {verdict}")
    slow = [f for f in facts if (f["picked_speedup"] or 0) < 1 - args.ranking_slack]
    out.append(f"- through the ranking (this backend + aten), layers slower than aten by more than "
               f"{args.ranking_slack:.0%}: {len(slow)}/{len(facts)}"
               + (" (" + "; ".join(f"{f['layer']} {f['direction']} {f['layout']} {fmt(f['picked_speedup'], 2, 'x')}"
                                   for f in slow) + ")" if slow else ""))
    out.append(ranking_accuracy(facts))
    return out


def chart(files: list[str], path: str, title: str) -> None:
    """The bench files' layers as ``conv_core.chart.bar_chart`` draws bench rows (their JSON fields suffice)."""
    from conv_core.chart import bar_chart

    rows = [SimpleNamespace(layer=f"{Path(f).stem.split('_')[0]}:{row['layer'][:28]}",
                            problem=SimpleNamespace(direction=row["direction"]), pick_speedup=row["pick_speedup"],
                            speedup=row["speedup"], aten_us=row["aten_us"], torch_us=row["torch_us"])
            for f in files for row in json.loads(Path(f).read_text())["rows"]]
    bar_chart(rows, path, title=title)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True)
    p.add_argument("--title", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--memory-target", type=float, default=2.0)
    p.add_argument("--nchw-target", type=float, default=1.3)
    p.add_argument("--compute-target", type=float, default=0.8)
    p.add_argument("--ranking-slack", type=float, default=0.05)
    p.add_argument("--few-channels", type=int, default=36)
    p.add_argument("--png", metavar="PATH", help="also draw the speedups as a bar chart (needs matplotlib)")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    lines, every = [f"# {args.title}", ""], []
    for path in args.files:
        data = json.loads(Path(path).read_text())
        facts = [layer_facts(row, args.backend) for row in data["rows"]]
        every += facts
        lines += [f"## {Path(path).stem}", "", f"{data['device_name']}, {data['reps']} repetitions, median.", ""]
        lines += table(facts) + [""]
    lines[2:2] = ["## Targets", "", *verdicts(every, args), ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    if args.png:
        chart(args.files, args.png, args.title)
    print("\n".join(verdicts(every, args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
