"""The ``conv-core`` command: inspect backends, explain choices, benchmark, tune, check, describe the machine.

::

    conv-core backends [--json]
    conv-core explain  --shape "n32 c64 k64 i56x56 f3x3 s1 p1" [--dtype bf16 --layout nhwc ...] [--json]
    conv-core bench    --suite resnet50 [--batch 32 --layers 5 --direction all --csv f.csv --json f.json --png f.png]
    conv-core bench    --model resnet50 [--modes eager,train --json f.json] | --host | --holdout | --report a.json ...
    conv-core tune     --suite resnet50 [--db PATH --export PATH --backend NAME]
    conv-core check    [--backend NAME]
    conv-core warmup   --model resnet50 | --suite resnet50 [--batch 32 --dtype bf16 --layout nhwc --train --benchmark]
    conv-core info     [--json]

Every subcommand is a small function over the library (:mod:`conv_core.explanation`,
:mod:`conv_core.bench`, :mod:`conv_core.tune`, ...), so what the command prints
a program can also get. Usage errors (a bad shape, an unknown suite) print one
line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import torch

from . import __version__
from .problem import DIRECTIONS, ConvProblem
from .cli_options import UsageError, parse_device, parse_dtype, parse_layout
from .text_table import format_table


# ---- choosing problems ----------------------------------------------------------------------------


def select_problems(args: argparse.Namespace, device: torch.device) -> list[tuple[str, ConvProblem]]:
    """``(layer, problem)`` pairs named by ``--suite``, ``--shape`` or ``--key``, in the chosen directions.

    Layers are cut to ``--layers`` before each is expanded into its
    directions, so ``--layers 2 --direction all`` gives six problems. Without
    ``--direction`` a problem keeps its own (``fwd``, unless a full key says otherwise).
    """
    from .arch import device_arch

    options = dict(batch=args.batch, dtype=args.dtype, layout=args.layout, direction="fwd", arch=device_arch(device))
    try:
        from . import suites
        from .explanation import describe_shape

        if args.suite:
            base = suites.suite_problems(args.suite, **options)
        else:  # one problem, named by its compact shape
            (_, problem), = ([(None, ConvProblem.from_key(args.key))] if args.key
                             else suites.problems_from_shape(args.shape, **options))
            base = [(describe_shape(problem), problem)]
        base = [(name, _with_epilogue(p, args.bias, args.activation)) for name, p in base]
    except (LookupError, ValueError) as exc:
        raise UsageError(_message(exc)) from None
    if args.layers is not None:
        base = base[: args.layers]
    if args.direction is None:
        return base
    directions = DIRECTIONS if args.direction == "all" else (args.direction,)
    transposed = transposed_layers(args)
    try:
        return [(name, p.with_direction(suites.TRANSPOSED_DIRECTIONS[d] if name in transposed else d))
                for name, p in base for d in directions]
    except ValueError as exc:
        raise UsageError(_message(exc)) from None


def _direction_label(problem: ConvProblem, transposed: bool) -> str:
    """The direction of the layer that ``problem`` computes, as tables show it."""
    from .suites import direction_label, layer_direction

    return direction_label(layer_direction(problem.direction, transposed), transposed)


def transposed_layers(args: argparse.Namespace) -> frozenset[str]:
    """The ``--suite``'s transposed layers, whose directions map onto their convolution's (:mod:`conv_core.suites`)."""
    from . import suites

    return suites.transposed_layers(args.suite) if args.suite else frozenset()


def require_backend(name: str | None) -> None:
    """A usage error naming ``name`` and the backends there are, unless it is one of them (or None)."""
    from .engine import get_engine

    backends = get_engine().registry.backends()
    if name is None or name in [b.name for b in backends]:
        return
    loaded = [b.name for b in backends if b.ok]
    failed = [b.name for b in backends if not b.ok]
    raise UsageError(f"no backend named {name!r}; loaded: {', '.join(loaded) or 'none'}"
                     + (f"; failed to load: {', '.join(failed)}" if failed else ""))


def _with_epilogue(problem: ConvProblem, bias: bool, activation: str | None) -> ConvProblem:
    """Add the epilogue options given on the command line (never remove a suite's own)."""
    changes = {}
    if bias:
        changes["bias"] = True
    if activation:
        changes["activation"] = activation
    return problem.replace(**changes) if changes else problem


def _message(exc: BaseException) -> str:
    """A KeyError's text without the quotes ``str()`` adds."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


# ---- subcommands ----------------------------------------------------------------------------------


def cmd_backends(args: argparse.Namespace) -> int:
    """List every backend the settings allow, loaded or not, with its failures so far."""
    from .engine import get_engine

    rows = []
    for b in get_engine().registry.backends():
        rows.append({
            "name": b.name, "entry_point": b.entry_point, "source": b.source,
            "version": b.info.version if b.info else None,
            "targets": list(b.info.targets) if b.info else [],
            "description": b.info.description if b.info else "",
            "status": "ok" if b.ok else f"load error: {b.load_error}",
            "failures": list(b.failures),
        })
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = [(r["name"], r["version"], ",".join(r["targets"]) or None, r["source"], r["status"], len(r["failures"]))
             for r in rows]
    print(format_table(("name", "version", "targets", "source", "status", "failures"), table, align="lllllr"))
    for r in rows:
        for failure in r["failures"]:
            print(f"  {r['name']}: {failure}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Print how the engine ranks the candidates of one problem, and why others are missing."""
    from .explanation import explain

    device = parse_device(args.device)
    require_backend(args.backend)
    problems = select_problems(args, device)
    if len(problems) != 1:
        raise UsageError("explain takes one problem: give --direction fwd, bwd_data or bwd_weight, not all")
    explanation = explain(problems[0][1], device=device, backend=args.backend)
    print(json.dumps(explanation.to_dict(), indent=1) if args.json else explanation)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Time every candidate on the chosen layers; print the table and the ranking's quality.

    ``--model``, ``--host``, ``--holdout`` and ``--report`` run the benchmarks of :mod:`conv_core.bench_cli`.
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
    from .engine import get_engine

    broken = sum(1 for e in entries if e.status != "ok")
    where = args.db or get_engine().settings.tuning_db
    print(f"\n{len(entries)} entries ({broken} broken) for {len(problems)} problems written to {where}"
          + (f" and {args.export}" if args.export else ""))
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    """Compile the kernels a model or a suite will run (each problem's first-ranked candidate, run once)."""
    from . import warmup
    from .arch import device_arch

    device = parse_device(args.device)
    options = dict(batch=args.batch, dtype=args.dtype, layout=args.layout, arch=device_arch(device))
    try:
        if args.model:
            options["batch"] = args.batch or 32
            problems = warmup.model_problems(args.model, image_size=args.image_size, fuse=args.fuse, **options)
        else:
            problems = warmup.suite_problems(args.suite, **options)
    except ImportError as exc:
        raise UsageError(f"--model needs torchvision ({exc})") from None
    except (LookupError, ValueError) as exc:
        raise UsageError(_message(exc)) from None
    transposed = transposed_layers(args) if not args.model else frozenset()
    done = warmup.warmup(problems, device, directions=DIRECTIONS if args.train else ("fwd",), transposed=transposed,
                         benchmark=args.benchmark)
    print(format_table(("layer", "dir", "kernel", "s"), [(w.name, _direction_label(w.problem, w.name in transposed),
                                                         w.kernel_id, f"{w.seconds:.2f}") for w in done],
                       align="lllr"))
    print(f"\n{len(done)} problems warmed up in {sum(w.seconds for w in done):.1f} s")
    if args.benchmark:
        from .engine import get_engine

        where = get_engine().settings.first_use_dir
        print(f"first-use timings kept in {where}" if where else
              "first-use timings not kept on disk (CONV_CORE_FIRST_USE_DIR is off)")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Run the conformance kit on each installed backend (or one); exit 1 on any failure.

    A backend that failed to load is checked too: its report says why, and fails.
    """
    from .engine import get_engine
    from .testing.conformance import run_conformance

    device = parse_device(args.device)
    names = [b.name for b in get_engine().registry.backends()]
    if args.backend is not None:
        require_backend(args.backend)
        names = [args.backend]
    failed, checks = [], 0
    for name in names:
        report = run_conformance(name, device, seed=args.seed, **_selection(args))
        print(report.summary() + "\n")
        checks += sum(passed + failures for passed, failures in report.counts.values())
        if not report.ok:
            failed.append(name)
    print(check_verdict(names, failed, checks, device))
    return 1 if failed else 0


def check_verdict(names: list[str], failed: list[str], checks: int, device) -> str:
    """``check``'s closing line: which backends were checked, against what, on which device, and the outcome."""
    what = (f"{checks} checks of {len(names)} backend{'s' if len(names) != 1 else ''} ({', '.join(names)}) on "
            f"{device}: results against the float64 reference, non-contiguous operands, metadata, coverage")
    if failed:
        return f"conformance: FAILED for {', '.join(failed)}: {what}; the failures are listed above"
    return f"conformance: PASSED: {what}"


def _selection(args: argparse.Namespace) -> dict:
    """The directions, dtypes and layouts ``check`` was narrowed to (all defaults when not given)."""
    try:
        return _parse_selection(args)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None


def _parse_selection(args: argparse.Namespace) -> dict:
    chosen = {}
    if args.directions:
        chosen["directions"] = tuple(args.directions.split(","))
        unknown = set(chosen["directions"]) - {"fwd", "bwd_data", "bwd_weight"}
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown direction(s) {sorted(unknown)}; use fwd, bwd_data, bwd_weight")
    if args.dtypes:
        chosen["dtypes"] = tuple(parse_dtype(d) for d in args.dtypes.split(","))
    if args.layouts:
        chosen["layouts"] = tuple(parse_layout(v) for v in args.layouts.split(","))
    if args.random is not None:
        chosen["random_count"] = args.random
    return chosen


def cmd_info(args: argparse.Namespace) -> int:
    """Print the machine, the software versions and the settings that decide what conv-core does."""
    from .machine import gather_info

    info = gather_info()
    if args.json:
        print(json.dumps(info, indent=1, default=str))
        return 0
    for section, values in info.items():
        print(f"{section}:")
        if isinstance(values, list):
            for item in values:
                print("  " + ", ".join(f"{k}={v}" for k, v in item.items()))
        else:
            for key, value in values.items():
                if isinstance(value, dict):
                    value = ", ".join(f"{k}={v}" for k, v in value.items())
                print(f"  {key}: {value}")
    return 0


def _progress(args: argparse.Namespace) -> bool | str:
    return "always" if args.progress else True


# ---- the parser -------------------------------------------------------------------------------------


def _add_problem_options(p: argparse.ArgumentParser, *, suite: bool) -> argparse._MutuallyExclusiveGroup:
    """The options that pick problems, shared by explain, bench and tune; returns the group of choices."""
    which = p.add_mutually_exclusive_group(required=True)
    if suite:
        which.add_argument("--suite", help="a named shape suite (see conv_core.suites)")
    which.add_argument("--shape", help='one layer, e.g. "n32 c64 k64 i56x56 f3x3 s1 p1" (or a problem key)')
    which.add_argument("--key", help="a full problem key (ConvProblem.key); --batch, --dtype and --layout are ignored")
    p.add_argument("--batch", type=int, help="batch size (default: the suite's; a shape's own n wins)")
    p.add_argument("--dtype", type=parse_dtype, default="bfloat16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--layout", type=parse_layout, default="channels_last",
                   help="nhwc/channels_last (default) or nchw/channels_first")
    directions = (*DIRECTIONS, "all") if suite else DIRECTIONS
    p.add_argument("--direction", choices=directions, help="default fwd" + (" (all: the three)" if suite else ""))
    p.add_argument("--bias", action="store_true", help="forward problems add a bias")
    p.add_argument("--activation", help="fused activation of forward problems (relu, gelu, silu, ...)")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    if suite:
        p.add_argument("--layers", type=int, help="only the first N layers")
    else:
        p.set_defaults(suite=None, layers=None)
    return which


def _add_timing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per kernel (median taken; default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing (default 3)")
    p.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conv-core", description="Pluggable convolutions for PyTorch: "
                                     "inspect backends, explain choices, benchmark and tune.")
    parser.add_argument("--version", action="version", version=f"conv-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("backends", help="list backends, their versions and errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("explain", help="show how one problem's candidates are ranked")
    _add_problem_options(p, suite=False)
    p.add_argument("--backend", help="restrict the choice to this backend")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("bench", help="time every candidate on a suite or a shape; or a real model, the host path, "
                       "the ranking on held-out layers (--model, --host, --holdout, --report)")
    which = _add_problem_options(p, suite=True)
    _add_timing_options(p)
    from . import bench_cli

    bench_cli.add_options(p, which)
    p.add_argument("--csv", metavar="PATH", help="write one line per (problem, kernel)")
    p.add_argument("--json", metavar="PATH", help="write the whole run as JSON ('-': print it instead of the table)")
    p.add_argument("--png", metavar="PATH", help="write a bar chart of the speedups (needs matplotlib)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tune", help="measure candidates into the tuning database")
    _add_problem_options(p, suite=True)
    _add_timing_options(p)
    p.add_argument("--db", metavar="PATH", help="tuning database (default: CONV_CORE_TUNING_DB or the cache dir)")
    p.add_argument("--export", metavar="PATH", help="also merge the entries into this table (for a backend to ship)")
    p.add_argument("--backend", help="tune only this backend's candidates, and aten's (to rank like with like)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("warmup", help="compile the kernels a model or a suite will run, before its first call",
                       description="Run each problem of a model or a suite once, so that its kernels are compiled "
                       "(and in Triton's disk cache) before the first real call. With --benchmark, each problem's "
                       "candidates are also timed as benchmark mode (CONV_CORE_BENCHMARK=1) times them, and the "
                       "times are kept in the first-use store (CONV_CORE_FIRST_USE_DIR, default "
                       "~/.cache/conv-core/first-use): a later process in benchmark mode on the same GPU, driver "
                       "and versions reads them instead of timing again.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a torchvision model name, e.g. resnet50 (random weights; needs torchvision)")
    which.add_argument("--suite", help="a named shape suite (see conv_core.suites)")
    p.add_argument("--batch", type=int, help="batch size (default: 32 for a model, the suite's own for a suite)")
    p.add_argument("--image-size", type=int, default=224, help="(--model) height and width of the images (224)")
    p.add_argument("--dtype", type=parse_dtype, default="bfloat16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--layout", type=parse_layout, default="channels_last",
                   help="nhwc/channels_last (default) or nchw/channels_first")
    p.add_argument("--train", action="store_true", help="the backward problems too (data and weight gradients)")
    p.add_argument("--fuse", action="store_true", help="(--model) convert as convert(model, fuse=True) does")
    p.add_argument("--benchmark", action="store_true",
                   help="rank in benchmark mode (as CONV_CORE_BENCHMARK=1): time each problem's candidates and keep "
                   "the times in the first-use store (CONV_CORE_FIRST_USE_DIR), which later processes in "
                   "benchmark mode read instead of timing again")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser("check", help="run the conformance kit on the installed backends")
    p.add_argument("--backend", help="check only this backend")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random cases (default 0)")
    p.add_argument("--directions", help="comma list of fwd,bwd_data,bwd_weight the backend claims (default: all)")
    p.add_argument("--dtypes", help="comma list, e.g. bf16,fp16 (default: the kit's)")
    p.add_argument("--layouts", help="comma list of nchw,nhwc (default: both)")
    p.add_argument("--random", type=int, help="random problems per run (default: the kit's)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("info", help="describe the machine, versions and settings")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    from . import tables_cli

    tables_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``conv-core``; returns the exit status (2 for usage errors)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # what a benchmark record names as its command
    except SystemExit as exc:  # --help, --version, or argparse's own usage error
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"conv-core {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
