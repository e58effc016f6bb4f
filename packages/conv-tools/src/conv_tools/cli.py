"""The ``conv-core`` subcommands of the offline tooling: ``bench`` and ``tune`` (``tables``:
:mod:`conv_tools.tables_cli`).

conv-core's command line finds them through this package's entry points (group ``conv_core.commands``):
each ``add_*`` function adds its subparser to conv-core's.
"""

from __future__ import annotations

import argparse
import json

import torch
from conv_core.cli import (UsageError, add_problem_options, in_directions, parse_device, require_backend,
                           shape_problems, usage_message, with_epilogue)
from conv_core.problem import ConvProblem
from conv_core.text_table import format_table
from conv_core.frontend.transposed import direction_label, layer_direction


def select_problems(args: argparse.Namespace, device: torch.device) -> list[tuple[str, ConvProblem]]:
    """``(layer, problem)`` pairs named by ``--suite``, ``--shape`` or ``--key``, in the chosen directions (see
    :func:`conv_core.cli.in_directions`)."""
    if not args.suite:
        return in_directions(args, shape_problems(args, device))
    from conv_core.arch import device_arch

    from . import suites

    try:
        base = suites.suite_problems(args.suite, batch=args.batch, dtype=args.dtype, layout=args.layout,
                                     direction="fwd", arch=device_arch(device))
        base = [(name, with_epilogue(p, args.bias, args.activation)) for name, p in base]
    except (LookupError, ValueError) as exc:
        raise UsageError(usage_message(exc)) from None
    return in_directions(args, base, transposed_layers(args))


def _direction_label(problem: ConvProblem, transposed: bool) -> str:
    """The direction of the layer that ``problem`` computes, as tables show it."""
    return direction_label(layer_direction(problem.direction, transposed), transposed)


def transposed_layers(args: argparse.Namespace) -> frozenset[str]:
    """The ``--suite``'s transposed layers, whose directions map onto their convolution's (:mod:`conv_tools.suites`)."""
    from . import suites

    return suites.transposed_layers(args.suite) if args.suite else frozenset()


def cmd_bench(args: argparse.Namespace) -> int:
    """Time every candidate on the chosen layers; print the table and the ranking's quality.

    ``--model``, ``--host``, ``--holdout`` and ``--report`` run the benchmarks of :mod:`conv_tools.bench_cli`.
    """
    from . import bench, bench_cli

    if bench_cli.chosen(args):
        return bench_cli.run(args)

    device = parse_device(args.device)
    if args.png:
        from .chart import ChartUnavailable, require_matplotlib

        try:
            require_matplotlib()
        except ChartUnavailable as exc:
            raise UsageError(str(exc)) from None
    problems = select_problems(args, device)
    rows = bench.run_bench(problems, device, reps=args.reps, warmup=args.warmup, progress=_progress(args),
                           transposed=transposed_layers(args))
    if args.json == "-":
        print(json.dumps(bench.to_json(rows, device, reps=args.reps, warmup=args.warmup), indent=1))
    else:
        print(bench.format_report(rows, str(device)))
    if args.json and args.json != "-":
        bench.write_json(rows, args.json, device, reps=args.reps, warmup=args.warmup)
    if args.csv:
        bench.write_csv(rows, args.csv)
    if args.png:
        from .chart import bar_chart

        bar_chart(rows, args.png, title=f"conv-core bench: {args.suite or args.shape or args.key} on {device}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """Gate and time every candidate; store the times in the tuning database (and an export table)."""
    from .tune import run_tune

    device = parse_device(args.device)
    require_backend(args.backend)
    problems = select_problems(args, device)
    results = []
    entries = run_tune(problems, device, reps=args.reps, warmup=args.warmup, db_path=args.db, export=args.export,
                       backend=args.backend, progress=_progress(args),
                       on_result=lambda layer, entry, detail: results.append((layer, entry, detail)))
    transposed = transposed_layers(args)
    table = [(layer, _direction_label(ConvProblem.from_key(e.problem), layer in transposed), e.kernel, e.status,
              f"{e.us:.1f}" if e.status == "ok" else None, detail or None) for layer, e, detail in results]
    print(format_table(("layer", "dir", "kernel", "status", "us", "detail"), table, align="llllrl"))
    from conv_core.engine import get_engine

    broken = sum(1 for e in entries if e.status != "ok")
    where = args.db or get_engine().settings.tuning_db
    print(f"\n{len(entries)} entries ({broken} broken) for {len(problems)} problems written to {where}"
          + (f" and {args.export}" if args.export else ""))
    return 0


def _progress(args: argparse.Namespace) -> bool | str:
    return "always" if args.progress else True


def _add_suite_options(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    which = add_problem_options(p, all_directions=True)
    which.add_argument("--suite", help="a named shape suite (see conv_tools.suites)")
    p.add_argument("--layers", type=int, help="only the first N layers")
    return which


def _add_timing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per kernel (median taken; default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    p.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")


def add_bench(sub) -> None:
    """``conv-core bench``."""
    from . import bench_cli

    p = sub.add_parser("bench", help="time every candidate on a suite or a shape; or a real model, the host path, "
                       "the ranking on held-out layers (--model, --host, --holdout, --report)")
    which = _add_suite_options(p)
    _add_timing_options(p)
    bench_cli.add_options(p, which)
    p.add_argument("--csv", metavar="PATH", help="write one line per (problem, kernel)")
    p.add_argument("--json", metavar="PATH", help="write the whole run as JSON ('-': print it instead of the table)")
    p.add_argument("--png", metavar="PATH", help="write a bar chart of the speedups (needs matplotlib)")
    p.set_defaults(func=cmd_bench)


def add_tune(sub) -> None:
    """``conv-core tune``."""
    p = sub.add_parser("tune", help="measure candidates into the tuning database")
    _add_suite_options(p)
    _add_timing_options(p)
    p.add_argument("--db", metavar="PATH", help="tuning database (default: CONV_CORE_TUNING_DB or the cache dir)")
    p.add_argument("--export", metavar="PATH", help="also merge the entries into this table (for a backend to ship)")
    p.add_argument("--backend", help="tune only this backend's candidates, and aten's (to rank like with like)")
    p.set_defaults(func=cmd_tune)
