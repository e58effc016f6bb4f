"""The real-model benchmark page: ``conv-core bench --report a.json [b.json ...] --out PAGE.md``.

Reads the records of the real-model (``kind: model``), DDP, host-time and held-out ranking benchmarks
and writes one current page: every ratio per model and mode, their geomeans, each of issue 31's
targets met or missed (and by how much), the picks per backend, the output errors, where and with
which software the runs were made, and the exact commands. Nothing on the page is typed by hand, so
it can only show numbers some run measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import bench_holdout, bench_record
from .bench_models import HEADLINE_MODELS, NEW_KIND_MODELS
from .model_bench_modes import MODES

MODE_TITLES = {"eager": "eager inference", "train": "training step (bf16)", "amp_train": "training step (AMP)",
               "graph": "CUDA graph inference", "graph_train": "CUDA graph training step",
               "compile": "torch.compile", "compile_max": "torch.compile max-autotune"}


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _x_spread(value: float | None, spread: list[float] | None) -> str:
    """``0.898x (0.87-0.93)``: a ratio and its rounds' lowest and highest, so a reader sees how far the machine
    moved during the run; just the ratio for a record made before rounds (it has no spread)."""
    return _x(value) + (f" ({spread[0]:.2f}-{spread[1]:.2f})" if value is not None and spread else "")


def _num(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits, without an exponent from 100 up (a time of 1234 ms reads 1234)."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 10 ** (digits - 1) and digits >= 3 else f"{value:.{digits}g}"


@dataclass
class Runs:
    """The records given to the page, by kind; a model's modes merged over its records (the latest run wins)."""

    records: list[dict]
    models: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for record in sorted(self.of("model"), key=lambda r: r.get("date") or ""):
            merged = self.models.setdefault(record["model"], {"record": record, "modes": {}})
            merged["record"] = record
            for mode in record["modes"]:
                if not mode["skipped"] or mode["mode"] not in merged["modes"]:
                    merged["modes"][mode["mode"]] = mode

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r.get("kind") == kind]

    def ratios(self, mode: str, variant: str = "conv") -> dict[str, float]:
        """model -> ``plain / variant`` time ratio in ``mode``, where it was measured."""
        found = {}
        for model, merged in self.models.items():
            ratio = merged["modes"].get(mode, {}).get("ratios", {}).get(variant)
            if ratio is not None:
                found[model] = ratio
        return found

    def spreads(self, mode: str, variant: str = "conv") -> dict[str, list[float]]:
        """model -> ``[lowest, highest]`` per-round ratio in ``mode``, where the record has one."""
        found = {}
        for model, merged in self.models.items():
            spread = merged["modes"].get(mode, {}).get("ratio_spread", {}).get(variant)
            if spread:
                found[model] = spread
        return found

    def judged(self, mode: str, variant: str = "conv") -> dict[str, float]:
        """The ratios a geomean target is judged on: those of the issue's model set where any was run, else all."""
        ratios = self.ratios(mode, variant)
        headline = {m: r for m, r in ratios.items() if m in HEADLINE_MODELS}
        return headline or ratios

    def modes_run(self) -> list[str]:
        return [m for m in MODES if any(m in merged["modes"] for merged in self.models.values())]


# ---- the targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: what is measured, the goal, and whether more or less is better."""

    what: str
    measure: Callable[[Runs], tuple[float | None, str]]
    goal: float
    at_least: bool = True

    def verdict(self, value: float | None) -> str:
        if value is None:
            return "not measured"
        met = value >= self.goal if self.at_least else value <= self.goal
        if met:
            return "met"
        return f"missed by {abs(value / self.goal - 1) * 100:.1f}%"


def _mode_geomean(mode: str, variant: str = "conv") -> Callable[[Runs], tuple[float | None, str]]:
    def measure(runs: Runs):
        ratios = runs.judged(mode, variant)
        return geomean(ratios.values()), f"{len(ratios)} of the {len(HEADLINE_MODELS)} models" if ratios else ""
    return measure


def _slowest(ratios: dict[str, float]) -> tuple[float | None, str]:
    if not ratios:
        return None, ""
    worst = min(ratios, key=ratios.get)
    return ratios[worst], f"{worst}, of {len(ratios)} models"


def _mode_min(mode: str, variant: str = "conv") -> Callable[[Runs], tuple[float | None, str]]:
    """The slowest model of every model run in ``mode`` (the bar holds for each, not only the headline set)."""
    return lambda runs: _slowest(runs.ratios(mode, variant))


def _fused_over_unfused(mode: str) -> Callable[[Runs], tuple[float | None, str]]:
    """The slowest model's fused time against its unfused converted time (fusion must never lose)."""
    def measure(runs: Runs):
        fused, conv = runs.ratios(mode, "fused"), runs.ratios(mode)
        return _slowest({model: fused[model] / conv[model] for model in fused.keys() & conv.keys()})
    return measure


def _ddp(runs: Runs) -> tuple[float | None, str]:
    found = [r for r in runs.of("ddp") if r.get("ratio") is not None]
    if not found:
        return None, ""
    record = max(found, key=lambda r: r["world_size"])
    return record["ratio"], f"{record['world_size']} GPUs, {record['model']}"


def _errors(runs: Runs) -> tuple[float | None, str]:
    """The share of (model, mode, variant) outputs within tolerance (1.0: all)."""
    judged = [(model, m["mode"], v, ok) for model, merged in runs.models.items() for m in merged["modes"].values()
              for v, ok in m.get("within_tolerance", {}).items() if v != "plain"]
    if not judged:
        return None, ""
    bad = [f"{model} {mode} {v}" for model, mode, v, ok in judged if not ok]
    return (len(judged) - len(bad)) / len(judged), ", ".join(bad) or f"{len(judged)} outputs"


def _host(backend_kind: str, whats: tuple[str, ...] | None = None) -> Callable[[Runs], tuple[float | None, str]]:
    """Worst host-time ratio to PyTorch's own call (``F.conv2d``, or torch's module for the ``module`` rows) of calls
    through aten (``backend_kind == "aten"``) or a plugin, over the rows of ``whats`` (default all)."""
    def measure(runs: Runs):
        rows = [row for record in runs.of("host") for row in record["rows"]
                if row["ratio"] is not None and row["backend"] is not None and (whats is None or row["what"] in whats)
                and (row["backend"] == "aten") == (backend_kind == "aten")]
        if not rows:
            return None, ""
        worst = max(rows, key=lambda r: r["ratio"])
        return worst["ratio"], f"{worst['label']} {worst['what']} {worst['layout']}"
    return measure


def _holdout(phase: str, statistic: str) -> Callable[[Runs], tuple[float | None, str]]:
    def measure(runs: Runs):
        for record in reversed(runs.of("holdout")):
            for result in record["phases"]:
                if result["set"] == "holdout" and result["phase"] == phase:
                    s = result["summary"]
                    return s[statistic], f"{s['timed']} problems"
        return None, ""
    return measure


#: Issue 31's targets: every model at least 0.98x plain in every mode, the geomeans over the headline models.
BAR = 0.98
TARGETS = (
    *(t for mode in ("eager", "train", "amp_train") for t in (
        Target(f"{MODE_TITLES[mode]}: geomean over the models", _mode_geomean(mode), 1.05),
        Target(f"{MODE_TITLES[mode]}: slowest model", _mode_min(mode), BAR))),
    Target("fused inference (`fuse=True`): geomean", _mode_geomean("eager", "fused"), 1.2),
    Target("fused inference: slowest model", _mode_min("eager", "fused"), BAR),
    Target("fused inference against unfused converted: slowest model", _fused_over_unfused("eager"), 1.0),
    Target("CUDA graph inference: geomean", _mode_geomean("graph"), 1.15),
    Target("CUDA graph inference: slowest model", _mode_min("graph"), BAR),
    Target("CUDA graph training step: geomean", _mode_geomean("graph_train"), 1.15),
    Target("CUDA graph training step: slowest model", _mode_min("graph_train"), BAR),
    Target("torch.compile: geomean", _mode_geomean("compile"), 1.0),
    Target("torch.compile: slowest model", _mode_min("compile"), BAR),
    Target("torch.compile max-autotune: geomean", _mode_geomean("compile_max"), 1.0),
    Target("DDP training step (AMP bf16)", _ddp, 1.0),
    Target("outputs within tolerance of float64 (share)", _errors, 1.0),
    Target("host time per call through aten, x PyTorch's (worst)", _host("aten"), 1.1, at_least=False),
    Target("host time per forward through a plugin, x PyTorch's (worst)", _host("plugin", ("fwd", "module")), 1.0,
           at_least=False),
    Target("host time per forward + backward through a plugin, x PyTorch's (worst)", _host("plugin", ("fwd_bwd",)),
           1.2, at_least=False),
    Target("ranking on held-out layers: geomean aten / pick", _holdout("default", "geomean"), 1.0),
    Target("ranking on held-out layers: worst layer", _holdout("default", "min"), 0.95),
    Target("ranking on held-out layers, benchmark mode: worst layer", _holdout("benchmark", "min"), 0.98),
)


# ---- sections ---------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(headers) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    return ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule) + " |",
            *("| " + " | ".join(r) + " |" for r in rows)]


#: The page's title unless ``--title`` names another (a page of other models beside the headline set).
DEFAULT_TITLE = "Real models: plain PyTorch against conv-core"


def header(runs: Runs, title: str = DEFAULT_TITLE) -> list[str]:
    dates = sorted(r["date"] for r in runs.records if r.get("date"))
    gpus = sorted({d["name"] for r in runs.records for d in r.get("environment", {}).get("devices", [])
                   if d["device"].startswith("cuda")}) or ["no GPU (CPU)"]
    versions = next((r["environment"]["versions"] for r in runs.records if r.get("environment")), {})
    backends = next((r["backends"] for r in runs.records if r.get("backends")), {})
    software = ", ".join(f"{k} {versions.get(k)}" for k in ("torch", "torchvision", "triton", "cudnn", "cuda",
                                                            "driver", "conv-core") if versions.get(k))
    configs = [merged["record"]["config"] for merged in runs.models.values()]
    timing = "; ".join(sorted({timing_words(c) for c in configs}))
    return [
        f"# {title}", "",
        f"Generated {datetime.now(timezone.utc).date()} by `conv-core bench --report` from {len(runs.records)} "
        f"run(s) made {dates[0] if dates else '?'} to {dates[-1] if dates else '?'}.", "",
        f"- GPU: {', '.join(gpus)}", f"- software: {software}",
        f"- backends: {', '.join(f'{k} {v}' for k, v in backends.items())}", "",
        "Each figure is `plain time / conv-core time` for one iteration (above 1: conv-core is faster), the "
        f"wall time with a device synchronize on either side, host work included ({timing}); plain and "
        "converted models are stepped in turn in one process, plain PyTorch with "
        "`torch.backends.cudnn.benchmark = True`." + (SPREAD_WORDS if any("rounds" in c for c in configs) else ""),
    ]


#: What the brackets beside a ratio mean, said where some record was timed in rounds.
SPREAD_WORDS = (" In brackets beside a ratio: the lowest and highest round's ratio (the same variant's time can move "
                "1.4-1.85x between stretches of one run on a shared GPU; a ratio within a round compares the "
                "variants in the same stretch).")


def timing_words(config: dict) -> str:
    """How a model record was timed: in alternating rounds, or (a record made before them) single iterations."""
    if "rounds" in config:
        order = ("each round in another order, each variant in each place equally often"
                 if config.get("order") == "rotated" else "the order reversed every other round")
        return (f"{config['warmup']} warm-up iterations, then {config['rounds']} rounds of {config['iterations']} "
                f"iterations per variant, the variants in turn, {order}; the figure is the median over rounds of "
                "each round's ratio of medians")
    return f"median of {config['reps']} iterations after {config['warmup']} warm-up ones"


def targets_section(runs: Runs) -> list[str]:
    rows = []
    for target in TARGETS:
        value, detail = target.measure(runs)
        shown = f"{value:.3f}" if value is not None else "-"
        rows.append([target.what, ("at least " if target.at_least else "at most ") + f"{target.goal:g}",
                     shown + (f" ({detail})" if detail else ""), target.verdict(value)])
    return ["## Targets (issue 31)", "", *_table(["target", "goal", "measured", "verdict"], rows, "llll")]


def ratios_section(runs: Runs, variant: str, title: str) -> list[str]:
    modes = [m for m in runs.modes_run() if runs.ratios(m, variant)]
    if not modes:
        return []
    rows = [[model] + [_x_spread(runs.ratios(m, variant).get(model), runs.spreads(m, variant).get(model))
                       for m in modes] for model in runs.models]
    rows.append(["**geomean**"] + [f"**{_x(geomean(runs.ratios(m, variant).values()))}**" for m in modes])
    for name, models in (("headline models", HEADLINE_MODELS), ("new kinds", NEW_KIND_MODELS)):
        if set(models) & set(runs.models) and set(runs.models) - set(models):
            rows.append([f"geomean, {name} ({', '.join(m for m in models if m in runs.models)})"]
                        + [_x(geomean(r for model, r in runs.ratios(m, variant).items() if model in models))
                           for m in modes])
    return [title, "", *_table(["model"] + [MODE_TITLES[m] for m in modes], rows)]


def _variants(mode: dict) -> dict:
    return mode.get("variants", {})


def times_section(runs: Runs) -> list[str]:
    rows = []
    for model, merged in runs.models.items():
        batch = merged["record"]["batch"]
        for name, mode in merged["modes"].items():
            if mode["skipped"]:
                rows.append([f"{model} (batch {batch})", name, f"skipped: {mode['skipped']}", "", "", "", ""])
                continue
            v = _variants(mode)
            ms = [_num(v.get(k, {}).get("ms")) for k in ("plain", "conv", "fused")]
            first = [_num(v.get(k, {}).get("first_s")) for k in ("plain", "conv")]
            rows.append([f"{model} (batch {batch})", name, *ms, *first])
    return ["## Times", "", "Milliseconds per iteration (median); seconds of the first call (compilation, "
            "capture and first-use choices included).", "",
            *_table(["model", "mode", "plain ms", "conv ms", "fused ms", "first call plain s", "first call conv s"],
                    rows, "llrrrrr")]


#: (eager mode, its CUDA-graph counterpart): a graph replays the GPU work without the host's, so the
#: difference between the two is what the host adds.
HOST_AND_GPU = (("eager", "graph"), ("train", "graph_train"))


def limit(eager: dict, graph: dict) -> tuple[float, float, float, float] | None:
    """(plain GPU ms, conv GPU ms, plain host ms, conv host ms) from an eager mode and its graph mode."""
    try:
        pg, cg = graph["variants"]["plain"]["ms"], graph["variants"]["conv"]["ms"]
        pe, ce = eager["variants"]["plain"]["ms"], eager["variants"]["conv"]["ms"]
    except KeyError:
        return None
    if None in (pg, cg, pe, ce):
        return None
    return pg, cg, max(0.0, pe - pg), max(0.0, ce - cg)


def limits_section(runs: Runs) -> list[str]:
    rows = []
    for model, merged in runs.models.items():
        for eager_mode, graph_mode in HOST_AND_GPU:
            found = limit(merged["modes"].get(eager_mode, {}), merged["modes"].get(graph_mode, {}))
            if found is None:
                continue
            pg, cg, ph, ch = found
            gpu, host = cg - pg, ch - ph
            if gpu <= 0 and host <= 0:
                verdict = "conv-core ahead on both"
            else:
                verdict = f"{'GPU' if gpu >= host else 'host'} ({max(gpu, host):+.3g} ms)"
            rows.append([model, eager_mode, _num(pg), _num(cg), _num(ph), _num(ch), verdict])
    if not rows:
        return []
    return ["## What limits the eager modes", "",
            "GPU ms: the CUDA-graph replay of the same work (graph, graph_train; the latter without the optimizer "
            "step); host ms: what the eager iteration takes beyond it. The verdict names the larger of conv-core's "
            "extra GPU time and extra host time over plain PyTorch.", "",
            *_table(["model", "mode", "plain GPU ms", "conv GPU ms", "plain host ms", "conv host ms", "limit"], rows,
                    "llrrrrl")]


def errors_section(runs: Runs) -> list[str]:
    rows = []
    for model, merged in runs.models.items():
        for name, mode in merged["modes"].items():
            if mode["skipped"]:
                continue
            v = _variants(mode)
            ok = mode.get("within_tolerance", {})
            verdict = ", ".join(f"{k} {'ok' if good else 'OUT'}" for k, good in ok.items() if k != "plain") or "-"
            rows.append([model, name, *(_num(v.get(k, {}).get("error"), 2) for k in ("plain", "conv", "fused")),
                         _num(mode.get("tolerated_error"), 2), verdict])
    return ["## Output error against float64", "",
            "`max |y - y64| / max |y64|` of the first iteration's output, against the same model run in float64 on "
            "the same input (training modes: the forward of the first step, dropout off where it can be). A "
            "converted variant is tolerated up to twice plain PyTorch's own error, or 4 unit roundoffs of the "
            "computing dtype if that is larger.", "",
            *_table(["model", "mode", "plain", "conv", "fused", "tolerated", "verdict"], rows, "llrrrrl")]


def _picks_cell(picks: dict, variant: str, direction: str) -> str:
    """``backend problems/calls, ...`` of one variant and direction (or why there are none)."""
    tally = picks.get(variant, {}).get("by_backend", {}).get(direction)
    if not tally:
        return picks.get(variant, {}).get("failed", "-")
    return ", ".join(f"{b} {t['problems']}/{t['calls']}" for b, t in sorted(tally.items()))


def picks_section(runs: Runs) -> list[str]:
    rows = []
    for model, merged in runs.models.items():
        picks = merged["record"].get("picks", {})
        rows.append([model, *(_picks_cell(picks, "conv", d) for d in ("fwd", "bwd_data", "bwd_weight")),
                     _picks_cell(picks, "fused", "fwd")])
    return ["## Picks per backend", "", "The backend of the kernel the engine ranks first for each distinct "
            "problem of the converted model: `backend problems/calls` (calls: how often one forward runs them).", "",
            *_table(["model", "fwd", "bwd_data", "bwd_weight", "fused fwd"], rows, "lllll")]


def notes_section(runs: Runs) -> list[str]:
    notes = [f"- cut short (a time limit?) before it finished, so parts are missing: `{r.get('command')}`"
             for r in runs.records if r.get("complete") is False]
    for model, merged in runs.models.items():
        for name, mode in merged["modes"].items():
            for variant, v in _variants(mode).items():
                if v.get("failed"):
                    notes.append(f"- {model} {name} {variant}: failed: {v['failed']}")
                notes += [f"- {model} {name} {variant}: {note}" for note in v.get("notes", [])]
    fused = any(merged["record"].get("fused_available") for merged in runs.models.values())
    if not fused and runs.models:
        notes.append("- no `fused` variant: this conv-core has no `optimize_for_inference`")
    return ["## Notes", "", *notes] if notes else []


def attribution_section(runs: Runs) -> list[str]:
    """Where each model below 1.0x in a mode loses its time (the records of ``bench --model --attribute``)."""
    from .model_attribution import page_lines

    lines = []
    for model, merged in runs.models.items():
        for record in merged["record"].get("attribution", []):
            ratio = merged["modes"].get(record["mode"], {}).get("ratios", {}).get("conv")
            if "failed" in record or ratio is None or ratio >= 1.0:
                continue
            lines += ["", *page_lines(f"{model}, {record['mode']} ({ratio:.3f}x)", record)]
    if not lines:
        return []
    return ["## Where the slower models lose time", "",
            "Each model below 1.0x, profiled (`conv-core bench --model NAME --attribute`): microseconds per step "
            "under the profiler, which slows the host alike in every variant; compare the columns, not the timed "
            "milliseconds above. Layers are those whose converted host + GPU time grew most.", *lines]


def _wrapped_runs(record: dict) -> list[tuple[str, dict]]:
    """A DDP record's (model label, figures) per wrapper: a record made before FSDP2 holds DDP's alone, at its
    top level; an FSDP2 row's model reads ``resnet50 (FSDP2)``."""
    wrappers = record.get("wrappers", {"ddp": record})
    return [(record["model"] + ("" if name == "ddp" else f" ({'FSDP2' if name == 'fsdp' else name})"), e)
            for name, e in wrappers.items()]


def ddp_section(runs: Runs) -> list[str]:
    found = [(label, r, e) for r in runs.of("ddp") for label, e in _wrapped_runs(r)]
    rows = [[label, str(r["world_size"]), str(r["batch_per_rank"]), _num(e["ms"]["plain"]), _num(e["ms"]["conv"]),
             _x_spread(e["ratio"], e.get("ratio_spread")),
             ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in e["parameters_equal_across_ranks"].items())]
            if "ms" in e else [label, str(r["world_size"]), str(r["batch_per_rank"]), "-", "-", "-",
                               f"skipped: {e.get('skipped', '?')}"[:100].replace("|", "/")]
            for label, r, e in found]
    if not rows:
        return []
    rounds = any(e.get("ratio_spread") for _, _, e in found)
    fsdp = any(label.endswith("(FSDP2)") for label, _, _ in found)
    return ["## DDP", "", "One AMP (bf16) training step under DistributedDataParallel"
            + (" (rows marked FSDP2: under FSDP2's `fully_shard` on each top-level child with parameters and the "
               "root, weights in the default memory format)" if fsdp else "") + ", the slowest rank's median"
            + ("; the ratio is the median over alternating rounds of each round's, in brackets the lowest and highest."
               if rounds else "."), "",
            *_table(["model", "GPUs", "batch per rank", "plain ms", "conv ms", "ratio",
                     "parameters equal on all ranks"], rows, "lrrrrrl")]


def host_section(runs: Runs) -> list[str]:
    lines = []
    for record in runs.of("host"):
        rows = [[r.get("dtype", record["dtype"]), r["layout"], r["what"], r["label"], r["kernel"] or "-",
                 _num(r["host_us"]), _num(r["wall_us"]),
                 _x(r["ratio"]) if r["ratio"] else (r["skipped"] or r["failed"] or "-")[:100]]
                for r in record["rows"]]
        lines += ["## Host time per call", "",
                  f"`{record['layer']}` on {record['device']}: microseconds per call of "
                  f"{record['calls']} calls issued back to back (median of {record['rounds']} rounds); ratio: host "
                  "time / `F.conv2d`'s (below 1: cheaper).", "",
                  *_table(["dtype", "layout", "what", "call", "kernel", "host us", "wall us", "x F.conv2d"], rows,
                          "lllllrrl"), ""]
    return lines


def holdout_section(runs: Runs) -> list[str]:
    return [line for record in runs.of("holdout")
            for line in ("## Ranking on held-out layers", "", bench_holdout.markdown(record), "")]


def commands_section(runs: Runs) -> list[str]:
    commands = list(dict.fromkeys(r["command"] for r in runs.records if r.get("command")))
    return ["## Commands", "", "```sh", *commands, "```"]


def render(records: list[dict], title: str = DEFAULT_TITLE) -> str:
    """The whole page, from the records."""
    runs = Runs(records)
    sections = [header(runs, title), targets_section(runs),
                ratios_section(runs, "conv", "## Time ratio per model and mode (converted model)"),
                ratios_section(runs, "fused", "## Time ratio per model and mode (converted and fused, "
                                              "`optimize_for_inference`)"),
                times_section(runs) if runs.models else [], limits_section(runs),
                errors_section(runs) if runs.models else [],
                picks_section(runs) if runs.models else [], attribution_section(runs), notes_section(runs),
                ddp_section(runs),
                host_section(runs), holdout_section(runs), commands_section(runs)]
    return "\n\n".join("\n".join(s).rstrip() for s in sections if s) + "\n"


def write_page(paths: list[str], out: str | Path | None, title: str = DEFAULT_TITLE) -> str:
    """Render the records at ``paths`` into ``out`` (or return the page only, when ``out`` is None)."""
    page = render([bench_record.read(p) for p in paths], title)
    if out is not None:
        Path(out).write_text(page)
    return page
