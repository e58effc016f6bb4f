"""``conv-core tables``: the shipped tables' pipeline and the benchmark pages, as subcommands.

::

    conv-core tables show    [TABLE.json ...]                  (default: every table the backends ship)
    conv-core tables split   TUNING_DB OUT_DIR [--run LABEL --merge]
    conv-core tables combine TABLES_DIR OUT_DIR BENCH.json ... [--run LABEL --sweep S.json --new NAME
                             --drop PREFIXES --replace PREFIXES]
    conv-core tables replay  RUN_DIR ... [--estimates]
    conv-core tables bundle  BUNDLE.json.gz --name NAME [--date D --command C --log N
                             --software S] BENCH.json|DIR ...
    conv-core tables report  --backend NAME --title TITLE [--out PAGE.md --png CHART.png] INPUT ...

``split`` and ``combine`` write tables that name the runs they came from (``--run``: an entry of
``docs/benchmarks/log.md``); ``show`` prints them. ``bundle`` keeps bench runs with their date and command,
``report`` writes a backend's page from bundles, folders or bench files (:mod:`conv_tools.suite_page`).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def add_parser(sub) -> None:
    """The ``tables`` subcommand and its own subcommands, on ``conv-core``'s subparsers ``sub``."""
    p = sub.add_parser("tables", help="the shipped tables' pipeline (show, split, combine, replay) and the "
                       "benchmark pages (bundle, report)")
    p.set_defaults(func=run)
    tsub = p.add_subparsers(dest="tables_command", required=True, metavar="SUBCOMMAND")

    s = tsub.add_parser("show", help="a table's runs and its entries by direction, layout and kernel family")
    s.add_argument("tables", nargs="*", metavar="TABLE", help="table files (default: those the backends ship)")
    s.add_argument("--runs", action="store_true", help="print only the runs each table names")

    s = tsub.add_parser("split", help="split a tuning database into one table per backend and architecture")
    s.add_argument("database")
    s.add_argument("out")
    s.add_argument("--run", help="the run the database came from, named in each table's runs")
    s.add_argument("--merge", action="store_true", help="merge into the tables already in OUT (a tuning of new "
                   "suites added to the shipped tables) instead of replacing them")

    s = tsub.add_parser("combine", help="fold bench runs into tables conservatively (against the plugin)")
    s.add_argument("tables", help="folder of the tables to fold into")
    s.add_argument("out", help="folder to write the folded tables to")
    s.add_argument("benches", nargs="+", metavar="BENCH", help="conv-core bench --json files")
    s.add_argument("--run", help="the run folded in, added to each table's runs")
    s.add_argument("--sweep", help="a sweep's output whose timings fill kernel ids the tables lack")
    s.add_argument("--new", help="start a table for this backend from the bench's times")
    s.add_argument("--drop", default="", help="kernel-id prefixes rewritten since (comma list)")
    s.add_argument("--replace", default="", help="kernel-id prefixes whose earlier times are wrong (comma list)")

    s = tsub.add_parser("replay", help="what the shipped tables pick on bench runs' layers, and how it did")
    s.add_argument("runs", nargs="+", metavar="RUN_DIR", help="folders of one bench run's *_*_*.json each")
    s.add_argument("--estimates", action="store_true", help="rank on the estimates alone (no tables)")

    s = tsub.add_parser("bundle", help="add a run of bench files to a bundle (with its date and command)")
    s.add_argument("bundle", help="the bundle (.json.gz compressed)")
    s.add_argument("inputs", nargs="+", metavar="BENCH", help="bench JSON files or folders of them")
    s.add_argument("--name", required=True, help="the run's name (a run of the same name is replaced)")
    s.add_argument("--date", help="when it ran (ISO 8601)")
    s.add_argument("--command", help="the command that made it")
    s.add_argument("--log", type=int, help="its entry in docs/benchmarks/log.md")
    s.add_argument("--software", help="versions the bench files do not record (torch, cuDNN, Triton)")

    s = tsub.add_parser("report", help="a backend's page from the latest run of each suite, direction, layout")
    s.add_argument("inputs", nargs="+", metavar="INPUT", help="bundles, folders of bench files, bench files")
    s.add_argument("--backend", required=True)
    s.add_argument("--title", required=True)
    s.add_argument("--out", help="the page to write (default: print it)")
    s.add_argument("--png", help="also draw the speedups as a bar chart (needs matplotlib)")


def run(args: argparse.Namespace) -> int:
    return {"show": show, "split": split, "combine": combine, "replay": replay, "bundle": bundle,
            "report": report}[args.tables_command](args)


def show(args: argparse.Namespace) -> int:
    from .tables import summary

    paths = args.tables
    if not paths:
        from conv_core.engine import get_engine

        paths = [path for _, path in get_engine().registry.tuning_tables()]
    for path in paths:
        facts = summary(path)
        print(f"{facts['path']}: {facts['entries']} entries ({facts['broken']} broken), {', '.join(facts['arch'])}")
        print("  runs:" if facts["runs"] else "  runs: none named")
        for line in facts["runs"]:
            print(f"    {line}")
        if not args.runs:
            print("\n".join(f"  {n:5d}  {what}" for what, n in facts["counts"].items()))
    return 0


def split(args: argparse.Namespace) -> int:
    from .tables import split as split_tables

    for name, n in split_tables(args.database, args.out, run=args.run, merge=args.merge).items():
        print(f"{name}: {n} entries")
    return 0


def _prefixes(text: str) -> tuple[str, ...]:
    return tuple(f"{prefix}:" for prefix in text.split(",") if prefix)


def combine(args: argparse.Namespace) -> int:
    from .tables import Fold
    from .tables import combine as combine_tables

    fold = Fold(drop=_prefixes(args.drop), replace=_prefixes(args.replace), sweep=args.sweep, new=args.new)
    for name, n in combine_tables(args.tables, args.out, args.benches, fold, run=args.run).items():
        print(f"{name}: {n} entries")
    return 0


def replay(args: argparse.Namespace) -> int:
    from .tables_replay import replay as replay_runs

    print("\n".join(replay_runs([Path(r) for r in args.runs], estimates=args.estimates).lines()))
    return 0


def bundle(args: argparse.Namespace) -> int:
    from . import bench_runs

    files = {stem: data for r in bench_runs.read(args.inputs) for stem, data in r.files.items()}
    run = bench_runs.Run(args.name, files, args.date, args.command, args.log, args.software)
    runs = bench_runs.add(args.bundle, run)
    print(f"{args.bundle}: {len(runs)} run(s); {args.name}: {len(files)} bench file(s)")
    return 0


def report(args: argparse.Namespace) -> int:
    from . import bench_runs, suite_page

    runs = bench_runs.read(args.inputs)
    regenerate = "conv-core " + " ".join(shlex.quote(a) for a in getattr(args, "argv", []))
    page = suite_page.render(runs, args.backend, args.title, regenerate)
    if args.out:
        Path(args.out).write_text(page + "\n")
        print(page.split("\n## Runs")[0].split("## Current figures")[-1].strip())  # the figures and targets
        print(f"wrote {args.out} from {len(runs)} run(s)")
    else:
        print(page)
    if args.png:
        suite_page.chart(runs, args.png, args.title)
    return 0
