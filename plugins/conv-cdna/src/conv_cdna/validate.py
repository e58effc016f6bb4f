"""The chip model's check where it can be measured: the same method on the H100 (sm_90), against conv-rdna's
measured times (``docs/benchmarks/raw/rdna.json.gz``), and the fit of each kernel's factors (``data/model.json``).

``python -m conv_cdna.validate [--fit] [--runs PATH]``:

- rebuilds the plan of every conv-rdna candidate the runs measured (:func:`build_rows`: the latest run of each
  suite, direction and layout; rows whose configuration, kernel or split no longer exist are counted and left out);
- fits each kernel's fractions of the modelled rates (:func:`fit`: a grid search minimising the squared log
  error of :func:`conv_cdna.model.estimate_us`; kernels with fewer than :data:`MIN_ROWS` rows take the other
  kernels' medians);
- judges the ranking on every measured problem with two candidates or more (:func:`metrics`): in-sample (fitted
  on all rows), held out by suite (fitted on the other two) and by layout, beside conv-rdna's own estimates,
  which were set by hand on these same suites (in-sample);
- prints the report as markdown; ``--fit`` also writes ``data/model.json`` from the fit on all rows.

Nothing here runs a kernel: plans are built without Triton's interpreter (``TRITON_INTERPRET`` is ignored while
they are built), as the GPU ran them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import gzip
import json
import math
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from conv_core.problem import ConvProblem
from conv_rdna import api as rdna_api
from conv_rdna.api import REGISTRY, Plan, make_plan

from . import model
from .chips import DATA, Chip, chip

#: The measured runs conv-rdna's benchmarks keep (the repository's copy).
RUNS = Path(__file__).resolve().parents[4] / "docs" / "benchmarks" / "raw" / "rdna.json.gz"
#: The architecture the method is checked on.
ARCH = "sm_90"
#: The fractions the grid search tries: 40 steps of about 10 % from 0.02 to 1, rounded as model.json keeps them.
GRID = tuple(round(0.02 * 50 ** (i / 39), 4) for i in range(40))
#: Fewer rows than this (or than this each way, for ``channels_first``) fit nothing: medians of the others.
MIN_ROWS = 8
#: The factors of one kernel, in model.json's order.
KEYS = ("compute", "memory", "channels_first")


@dataclass(frozen=True)
class Row:
    """One measured candidate: its plan rebuilt, its time, the model's terms at full rates on the measured chip
    and conv-rdna's estimate."""

    suite: str
    problem: ConvProblem
    plan: Plan
    us: float
    compute_us: float
    memory_us: float
    launches: int
    #: the kernel's ``channels_first`` fraction applies (:func:`conv_cdna.model.strided_reads`)
    strided_reads: bool
    rdna_us: float

    @property
    def kernel(self) -> str:
        return self.plan.kernel

    @property
    def group(self) -> tuple[str, str]:
        """The problem the candidates compete for (its key holds the direction and the layout)."""
        return self.suite, self.problem.key


# ---- the measured rows ---------------------------------------------------------------------------------


def latest_files(runs: list[dict]) -> dict[str, tuple[dict, dict]]:
    """``file key -> (run, file)``, each file from the latest run that holds it (runs in date order)."""
    files = {}
    for run in sorted(runs, key=lambda r: r["date"]):
        for key, file in run["files"].items():
            files[key] = (run, file)
    return files


def suite_of(key: str, direction: str) -> str:
    """``resnet50`` of ``resnet50_bwd_data_nhwc``."""
    return key[: -len(f"_{direction}_{key.rsplit('_', 1)[1]}")]


@contextlib.contextmanager
def compiled_plans() -> Iterator[None]:
    """Plans as compiled kernels get them (some constexprs differ under ``TRITON_INTERPRET=1``)."""
    saved = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved


def find_config(tab: rdna_api.ArchTable, family: str, name: str):
    """The configuration called ``name``: shipped, else from the sweep space; None where it is gone."""
    space = (*tab.configs(family), *rdna_api.space_configs(tab.name, family))
    return next((c for c in space if c.name == name), None)


def rebuild(problem: ConvProblem, kernel_id: str, tab: rdna_api.ArchTable) -> Plan | str:
    """The plan of a measured ``rdna:<kernel>:<config name>``, or why it cannot be rebuilt."""
    _, kernel, name = kernel_id.split(":")
    if kernel not in REGISTRY.names:
        return "kernel gone"
    family = REGISTRY.family_of(kernel)
    config = find_config(tab, family, name.rsplit("x", 1)[0] if "bwd_weight" in kernel else name)
    if config is None:
        return "configuration gone"
    plan = make_plan(problem, kernel, config, tab)
    return plan if plan.config_name == name else "split differs"


def make_row(suite: str, problem: ConvProblem, plan: Plan, us: float, tab: rdna_api.ArchTable, target: Chip) -> Row:
    """A measured plan with the model's terms on ``target`` and conv-rdna's estimate from ``tab``."""
    return Row(suite, problem, plan, us, model.compute_us(problem, plan, target),
               model.memory_us(problem, plan, target), model.launches_of(plan), model.strided_reads(problem, plan),
               REGISTRY[plan.kernel].estimate(problem, plan, tab))


def build_rows(runs: list[dict], arch: str = ARCH) -> tuple[list[Row], collections.Counter]:
    """Every conv-rdna candidate measured without error, and the count of those left out by reason."""
    tab, target, skipped, rows = rdna_api.rdna_table(arch), chip(arch), collections.Counter(), []
    with compiled_plans():
        for key, (_, file) in sorted(latest_files(runs).items()):
            for measured in file["rows"]:
                problem = ConvProblem.from_key(measured["problem"])
                for m in measured["measurements"]:
                    if not m["kernel"].startswith("rdna:") or m["error"] or not m["us"]:
                        continue
                    plan = rebuild(problem, m["kernel"], tab)
                    if isinstance(plan, str):
                        skipped[plan] += 1
                        continue
                    rows.append(make_row(suite_of(key, measured["direction"]), problem, plan, m["us"], tab, target))
    return rows, skipped


def read_runs(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["runs"]


# ---- the fit -------------------------------------------------------------------------------------------


def grid_log_errors(rows: list[Row], grids: tuple, launch_us: float) -> torch.Tensor:
    """Summed squared log errors of :func:`conv_cdna.model.estimate_us` for every combination of ``grids``
    (compute, memory, channels_first fractions), the same formula on tensors (test_model checks it)."""
    compute, memory, cf = (torch.tensor(g, dtype=torch.float64).view(*(-1 if i == j else 1 for j in range(4)))
                           for i, g in enumerate(grids))
    column = {name: torch.tensor([getattr(r, name) for r in rows], dtype=torch.float64)
              for name in ("compute_us", "memory_us", "launches", "us")}
    strided = torch.tensor([r.strided_reads for r in rows])
    rate = compute * torch.where(strided, cf, torch.ones_like(cf))
    estimate = torch.maximum(column["compute_us"] / rate, column["memory_us"] / memory) \
        + column["launches"] * launch_us
    return ((estimate.log() - column["us"].log()) ** 2).sum(-1)


def both_ways(rows: list[Row]) -> bool:
    """Whether ``rows`` hold :data:`MIN_ROWS` plans to which ``channels_first`` applies and as many to which it
    does not: enough to fit it."""
    loads = collections.Counter(r.strided_reads for r in rows)
    return min(loads[True], loads[False]) >= MIN_ROWS


def fit_kernel(rows: list[Row], launch_us: float) -> dict[str, float]:
    """The fractions with the least squared log error; ``channels_first`` is 1 unless it was measured both ways
    (:func:`both_ways`)."""
    grids = (GRID, GRID, GRID if both_ways(rows) else (1.0,))
    errors = grid_log_errors(rows, grids, launch_us)
    best = torch.unravel_index(errors.argmin(), errors.shape)
    return {key: grid[int(i)] for key, grid, i in zip(KEYS, grids, best)}


def fit(rows: list[Row], launch_us: float | None = None) -> dict[str, dict[str, float]]:
    """``{kernel: {"compute", "memory", "channels_first"}}`` for every registry kernel: fitted where it has
    :data:`MIN_ROWS` rows, else each factor the median of the kernels that fitted it."""
    launch_us = chip(ARCH).launch_us if launch_us is None else launch_us
    by_kernel = collections.defaultdict(list)
    for r in rows:
        by_kernel[r.kernel].append(r)
    fitted = {k: fit_kernel(rs, launch_us) for k, rs in sorted(by_kernel.items()) if len(rs) >= MIN_ROWS}
    medians = {key: median_of(f[key] for k, f in fitted.items()
                              if key != "channels_first" or both_ways(by_kernel[k])) for key in KEYS}
    return {k: dict(fitted.get(k, medians)) for k in REGISTRY.names}


def median_of(values) -> float:
    """The median of fitted grid values, snapped to the grid (1 where there are none)."""
    values = list(values)
    if not values:
        return 1.0
    middle = statistics.median(values)
    return min(GRID, key=lambda g: abs(math.log(g / middle)))


def fitted_kernels(rows: list[Row]) -> set[str]:
    """The kernels :func:`fit` fits on ``rows`` (the others take medians)."""
    return {k for k, n in collections.Counter(r.kernel for r in rows).items() if n >= MIN_ROWS}


# ---- the judgement -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metrics:
    groups: int
    rows: int
    top1: float
    pick_over_best: float
    spearman: float
    median_log_error: float


def ranks(values: list[float]) -> list[float]:
    """Ranks from 0, ties given their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            result[k] = (i + j) / 2
        i = j + 1
    return result


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation (Pearson's of the ranks; 0 where one side is all ties)."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    norm = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / norm if norm else 0.0


def metrics(rows: list[Row], estimate: Callable[[Row], float]) -> Metrics:
    """How ``estimate`` ranks each problem's measured candidates (problems with two or more): how often its
    fastest is the measured fastest, the geomean of its pick's measured time over the best, the mean rank
    correlation; and the median ``|log(estimate / measured)|`` over those rows."""
    groups = collections.defaultdict(list)
    for r in rows:
        groups[r.group].append(r)
    judged = [g for g in groups.values() if len(g) >= 2]
    top1, logs, rhos, errors = 0, [], [], []
    for g in judged:
        estimates = [estimate(r) for r in g]
        best = min(r.us for r in g)
        picked = g[estimates.index(min(estimates))].us
        top1 += picked == best
        logs.append(math.log(picked / best))
        rhos.append(spearman([r.us for r in g], estimates))
        errors += [abs(math.log(e / r.us)) for r, e in zip(g, estimates)]
    n = len(judged)
    return Metrics(n, len(errors), top1 / n, math.exp(statistics.fmean(logs)), statistics.fmean(rhos),
                   statistics.median(errors))


def model_estimate(fitted: dict, target: Chip) -> Callable[[Row], float]:
    return lambda r: model.estimate_us(r.problem, r.plan, target, fitted)


def rdna_estimate(r: Row) -> float:
    return r.rdna_us


@dataclass(frozen=True)
class Split:
    """One evaluation: fitted on ``train``, judged on ``test``."""

    name: str
    train: list[Row]
    test: list[Row]
    #: the suite held out, if one is
    suite: str | None = None


def splits(rows: list[Row]) -> list[Split]:
    """In-sample, each suite held out, each layout held out."""
    result = [Split("in-sample (fit on all, judged on all)", rows, rows)]
    for suite in sorted({r.suite for r in rows}):
        result.append(Split(f"held out: {suite}", [r for r in rows if r.suite != suite],
                            [r for r in rows if r.suite == suite], suite))
    for layout, short in (("channels_first", "NCHW"), ("channels_last", "NHWC")):
        result.append(Split(f"held out: {short} (fit on the other layout)",
                            [r for r in rows if r.problem.layout != layout],
                            [r for r in rows if r.problem.layout == layout]))
    return result


def evaluate(rows: list[Row]) -> list[tuple[str, Metrics, Metrics]]:
    """``(name, model's metrics, conv-rdna's)`` of every split, and of the suites held out pooled (each row
    estimated with the fit that did not see its suite), in all and by direction, after the suites."""
    target, judged, pooled = chip(ARCH), [], {}
    for split in splits(rows):
        fitted = fit(split.train)
        if split.suite:
            pooled |= {id(r): model.estimate_us(r.problem, r.plan, target, fitted) for r in split.test}
        judged.append((split, metrics(split.test, model_estimate(fitted, target)),
                       metrics(split.test, rdna_estimate)))
    held = [r for r in rows if id(r) in pooled]
    pooled_results = []
    for direction in ("", "fwd", "bwd_data", "bwd_weight"):
        subset = [r for r in held if direction in ("", r.problem.direction)]
        name = "held out: the suites pooled" + (f", {direction} only" if direction else "")
        pooled_results.append((name, metrics(subset, lambda r: pooled[id(r)]), metrics(subset, rdna_estimate)))
    last_suite = max(i for i, (split, _, _) in enumerate(judged) if split.suite)
    named = [(split.name, ours, rdna) for split, ours, rdna in judged]
    return named[:last_suite + 1] + pooled_results + named[last_suite + 1:]


# ---- the report and model.json -------------------------------------------------------------------------


def metrics_table(results: list[tuple[str, Metrics, Metrics]]) -> str:
    lines = ["| evaluation | problems | rows | estimate | top-1 | pick / best | Spearman | median abs log error |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for name, ours, rdna in results:
        for who, m in (("cdna model", ours), ("conv-rdna", rdna)):
            lines.append(f"| {name} | {m.groups} | {m.rows} | {who} | {m.top1:.2f} | {m.pick_over_best:.3f} "
                         f"| {m.spearman:.2f} | {m.median_log_error:.2f} |")
    return "\n".join(lines)


def factors_table(fitted: dict, rows: list[Row]) -> str:
    counts = collections.Counter(r.kernel for r in rows)
    chosen = fitted_kernels(rows)
    lines = ["| kernel | rows | compute | memory | channels_first | source |", "|---|---:|---:|---:|---:|---|"]
    for kernel, f in fitted.items():
        source = "fitted" if kernel in chosen else "median of the others"
        lines.append(f"| {kernel} | {counts[kernel]} | {f['compute']} | {f['memory']} | {f['channels_first']} "
                     f"| {source} |")
    return "\n".join(lines)


def used_runs(runs: list[dict]) -> list[dict]:
    """What identifies each run the rows come from: name, date, command, software, device."""
    used = {}
    for run, file in latest_files(runs).values():
        used[run["name"]] = {k: run[k] for k in ("name", "date", "command", "software")} \
            | {"device": file["device_name"]}
    return list(used.values())


def without_channels_first(rows: list[Row]) -> list[tuple[str, Metrics, Metrics]]:
    """:func:`evaluate` of the model without its ``channels_first`` fraction (fitted as 1 everywhere): what the
    term adds."""
    return evaluate([dataclasses.replace(r, strided_reads=False) for r in rows])


def report(rows: list[Row], skipped: collections.Counter, runs: list[dict]) -> str:
    """The markdown report: the data, the figures, the same without ``channels_first``, the factors fitted on all
    rows."""
    provenance = "\n".join(f"- {run['name']} ({run['date']}, {run['device']}): `{run['command']}`, {run['software']}"
                           for run in used_runs(runs))
    left_out = ", ".join(f"{n} ({why})" for why, n in skipped.items()) or "none"
    return (f"## The chip model on the H100 ({ARCH})\n\n{provenance}\n\n"
            f"{len(rows)} measured conv-rdna candidates, left out: {left_out}.\n\n"
            f"{metrics_table(evaluate(rows))}\n\n"
            f"### Without the channels_first fraction\n\n{metrics_table(without_channels_first(rows))}\n\n"
            f"### Factors fitted on all rows\n\n{factors_table(fit(rows), rows)}\n")


def model_json(rows: list[Row], runs: list[dict]) -> dict:
    """``data/model.json``: the factors fitted on all rows, and what they were fitted on."""
    counts = collections.Counter(r.kernel for r in rows)
    return {
        "_doc": ("Each kernel's fractions of the rates conv_cdna.model gives it: compute (of the modelled matrix or "
                 "vector rate), memory (of the copy rate), channels_first (of the compute rate, further, on "
                 "channels-first tensors read against their layout: conv_cdna.model.strided_reads; 1 where the "
                 "kernel was not measured both ways). Fitted by python -m conv_cdna.validate --fit on conv-rdna's "
                 "measured H100 (sm_90) times, minimising the squared log error over a grid of fractions from 0.02 "
                 "to 1 (docs/cdna-model.md). No AMD hardware was measured: the CDNA estimates carry these H100 "
                 f"fractions over. The kernels in fitted_on.medians had fewer than {MIN_ROWS} rows (or none) and take "
                 "the median of the fitted kernels' fractions."),
        "fitted_on": {
            "arch": ARCH,
            "runs": used_runs(runs),
            "rows": len(rows),
            "rows_per_kernel": {k: counts[k] for k in REGISTRY.names},
            "medians": sorted(set(REGISTRY.names) - fitted_kernels(rows)),
        },
        "factors": fit(rows),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=RUNS, help="conv-core-bench-runs/1 file (gzip JSON)")
    parser.add_argument("--fit", action="store_true", help="write data/model.json from the fit on all rows")
    args = parser.parse_args(argv)
    runs = read_runs(args.runs)
    rows, skipped = build_rows(runs)
    print(report(rows, skipped, runs))
    if args.fit:
        path = Path(str(DATA.path("model.json")))
        path.write_text(json.dumps(model_json(rows, runs), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
