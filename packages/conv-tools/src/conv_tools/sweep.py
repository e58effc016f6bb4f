"""The offline configuration sweep: time a backend's configuration space on model layers, ship the winners.

A backend whose tile configurations are data (buckets per architecture, chosen from the problem alone)
starts from configurations reasoned from the hardware. This sweep replaces reasoning by measurement
without any run-time autotuning: run explicitly on a GPU, it tries a small space of configurations on
every layer of the model suites, gates each against the float64 reference first (a wrong configuration
is never a winner), times the survivors, and writes the fastest per family and layer into the
backend's ``data/swept/<arch>.json``, which its tables read as exact-layer entries. The same problem
then picks the same configuration on every run, and the figure behind each pick is in the repository.

A backend describes its space with a :class:`Space` and gets a command line from :func:`main`::

    python -m conv_<backend>.sweep run --out sweep.json [--families ...] [--suites resnet50:32,...]
    python -m conv_<backend>.sweep merge sweep.json        # -> data/swept/<arch>.json

The output of ``run`` is rewritten after each suite, so a run cut short by a time limit keeps what it
measured; split long sweeps with ``--families``, ``--layouts`` and ``--directions``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from conv_core.arch import device_arch, device_name
from conv_core.candidate import Candidate
from conv_core.kit.tables import layer_key, read_swept
from conv_core.problem import ConvProblem
from conv_core.reference import Expected, expected, random_operands
from conv_core.timing import median_us

from .suites import suite_problems
from .tune import gate

LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Trial:
    """One configuration of one kernel family to try on one problem.

    ``raw`` is the configuration as the backend's tables write it (what a win ships). ``make`` builds
    the candidate that runs it, exactly as the backend would offer it; it may raise (the configuration
    does not fit the problem), which the sweep records as an error. ``may_win`` false times a variant
    for the record without ever shipping it (a non-deterministic one, say).
    """

    family: str
    kernel: str
    raw: dict
    make: Callable[[], Candidate]
    may_win: bool = True


class Space(Protocol):
    """What a backend gives the sweep."""

    #: The package the sweep belongs to (``conv_rdna``): the command line's name.
    package: str
    #: Every family with a sweep space.
    families: tuple[str, ...]
    #: ``name:batch`` -> the families swept on that suite by default.
    default_suites: dict[str, tuple[str, ...]]
    #: The layouts the backend's kernels take, as ``LAYOUTS`` keys.
    layouts: tuple[str, ...]

    def trials(self, problem: ConvProblem, device: torch.device, families: frozenset[str]) -> Iterable[Trial]:
        """The configurations of ``families`` to try on ``problem`` (none where the backend declines)."""

    def swept_path(self, arch: str) -> Path:
        """Where the winners for ``arch`` are written (the package's ``data/swept/<arch>.json``)."""


def time_trial(problem: ConvProblem, trial: Trial, operands: tuple, known: Expected, device: torch.device,
               reps: int) -> dict:
    """Gate one trial against the reference (``known``, computed once per layer), then time it. Never
    raises: a configuration that fails to build, compile, launch or match is recorded with its error and
    is just not a winner."""
    row = {"kernel": trial.kernel, "us": None, "error": None, "may_win": trial.may_win}
    try:
        candidate = trial.make()
        row["config"] = candidate.config
        ok, detail = gate(problem, candidate, operands, known)
        if not ok:
            row["error"] = detail
            return row
        row["us"] = median_us(lambda: candidate.run(*operands), device, warmup=2, reps=reps)
    except Exception as exc:  # the sweep goes on: one bad configuration must not end a GPU run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return row


def sweep_problem(space: Space, problem: ConvProblem, device: torch.device, families: frozenset[str],
                  reps: int) -> list[dict]:
    """Every trial of ``families`` that applies to ``problem``, gated and timed, as result rows."""
    trials = list(space.trials(problem, device, families))
    if not trials:
        return []
    operands = random_operands(problem, device, seed=0)
    known = expected(problem, operands)
    layer = layer_key(problem)
    return [{"family": t.family, "layer": layer, "raw": t.raw, **time_trial(problem, t, operands, known, device, reps)}
            for t in trials]


def suite_layers(spec: str, directions: Iterable[str], layout: str, dtype: str, arch: str) -> Iterator[ConvProblem]:
    """The problems of suite ``spec`` (``name[:batch]``) in each direction.

    Directions are the layers' (:func:`conv_tools.suites.suite_problems`): a transposed layer's forward is its
    convolution's ``bwd_data`` problem, so the three directions together sweep the same problems either way.
    """
    name, _, batch = spec.partition(":")
    for direction in directions:
        for _, problem in suite_problems(name, batch=int(batch) if batch else None, dtype=dtype, layout=layout,
                                         direction=direction, arch=arch):
            yield problem


def selection(space: Space, families: str | None, suites: str | None) -> dict[str, frozenset[str]]:
    """Suite spec -> the families swept on it, from ``run``'s ``--families`` and ``--suites``: by default
    each of the space's default suites with its own families; suites given explicitly take every
    selected family."""
    chosen = set(families.split(",")) if families else set(space.families)
    unknown = sorted(chosen - set(space.families))
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(space.families)}")
    by_suite = (space.default_suites if suites is None
                else dict.fromkeys(suites.split(","), space.families))
    return {spec: frozenset(chosen & set(suite_families)) for spec, suite_families in by_suite.items()}


def run(space: Space, args: argparse.Namespace) -> int:
    """``run``: sweep the selected suites on this GPU, layouts outermost (a time-out leaves whole layouts)."""
    device = torch.device("cuda")
    arch = device_arch(device)
    rows, start = [], time.time()
    for layout in args.layouts.split(","):
        for spec, families in selection(space, args.families, args.suites).items():
            for problem in suite_layers(spec, args.directions.split(","), LAYOUTS[layout], DTYPES[args.dtype], arch):
                rows += sweep_problem(space, problem, device, families, args.reps)
            print(f"{time.time() - start:7.1f}s {layout} {spec} done ({len(rows)} timings)", flush=True)
            Path(args.out).write_text(json.dumps({"arch": arch, "device": device_name(device), "results": rows},
                                                 indent=1))
    return 0


def winners(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """family -> layer key -> the fastest correct configuration among those that may win."""
    best: dict[tuple[str, str], dict] = {}
    for row in rows:
        if row["us"] is None or not row.get("may_win", True):
            continue
        key = (row["family"], row["layer"])
        if key not in best or row["us"] < best[key]["us"]:
            best[key] = row
    table: dict[str, dict[str, dict]] = {}
    for (family, layer), row in sorted(best.items()):
        table.setdefault(family, {})[layer] = row["raw"]
    return table


def merged(swept: dict, results: dict) -> dict:
    """``swept`` (a ``data/swept`` file's content, possibly empty) with ``results``' winners on top."""
    out = {"layers": {}, **swept}
    for family, layers in winners(results["results"]).items():
        out["layers"].setdefault(family, {}).update(layers)
    out.update({"_doc": "Exact-layer winners of the offline sweep (conv_tools.sweep); read by the backend's configs.",
                "arch": results["arch"], "device": results["device"], "measured": True})
    return out


def merge(space: Space, args: argparse.Namespace) -> int:
    """``merge``: write a sweep's winners into the space's ``data/swept/<arch>.json`` (or ``--into``),
    on top of the file's earlier winners."""
    results = json.loads(Path(args.results).read_text())
    path = Path(args.into) if args.into else Path(space.swept_path(results["arch"]))
    swept = merged(read_swept(path), results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(swept, indent=1, sort_keys=True) + "\n")
    print(f"merged into {path} ({results['arch']}, {results['device']}): "
          f"{ {f: len(v) for f, v in swept['layers'].items()} }")
    return 0


def main(space: Space, argv: list[str] | None = None, description: str = "") -> int:
    """The sweep's command line for ``space`` (``run`` and ``merge``)."""
    parser = argparse.ArgumentParser(prog=f"python -m {space.package}.sweep", description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="time the sweep space on this GPU")
    p.add_argument("--families", help="comma list (default: every family of the space)")
    p.add_argument("--suites", help="comma list of name[:batch], each swept for every selected family "
                                    f"(default: {', '.join(space.default_suites)}, each for its own families)")
    p.add_argument("--directions", default="fwd,bwd_data,bwd_weight")
    p.add_argument("--layouts", default=",".join(space.layouts))
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
    p = sub.add_parser("merge", help="write a sweep's winners into data/swept/<arch>.json")
    p.add_argument("results")
    p.add_argument("--into", help="write this file instead of the package's data/swept/<arch>.json")
    p.set_defaults(func=merge)
    args = parser.parse_args(argv)
    return args.func(space, args)
