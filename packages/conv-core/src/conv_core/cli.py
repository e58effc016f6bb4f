"""The ``conv-core`` command: inspect backends, explain choices, warm up a model, check backends, describe the machine.

::

    conv-core backends [--json]
    conv-core explain  --shape "n32 c64 k64 i56x56 f3x3 s1 p1" [--dtype bf16 --layout nhwc ...] [--json]
    conv-core warmup   --model resnet50 | --shape SHAPE [--shape ...] [--batch 32 --dtype bf16 --train --benchmark]
    conv-core check    [--backend NAME]
    conv-core info     [--json]

The offline tooling (``conv-tools``) adds ``bench``, ``tune`` and ``tables`` when it is installed: each package
may add subcommands through an entry point in the group ``conv_core.commands``, a function that takes the
subparsers and adds its own (:data:`COMMANDS`). Without it those names say which package to install.

Every subcommand is a small function over the library (:mod:`conv_core.explanation`, :mod:`conv_core.warmup`,
...), so what the command prints a program can also get. Usage errors (a bad shape, an unknown model) print
one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import metadata

import torch

from . import __version__
from .cli_options import UsageError, parse_device, parse_dtype, parse_layout
from .problem import DIRECTIONS, ConvProblem
from .text_table import format_table

#: The entry-point group through which installed packages add subcommands.
COMMANDS = "conv_core.commands"
#: Subcommands of the offline tooling, and the package that brings them.
TOOLING_COMMANDS = {"bench": "conv-tools", "tune": "conv-tools", "tables": "conv-tools"}


# ---- choosing problems ----------------------------------------------------------------------------


def shape_problems(args: argparse.Namespace, device: torch.device) -> list[tuple[str, ConvProblem]]:
    """The ``(layer, problem)`` of each ``--shape`` (or ``--key``), forward unless a full key says otherwise, with
    the ``--bias`` and ``--activation`` given."""
    from .arch import device_arch
    from .explanation import describe_shape
    from .shapes import problems_from_shape

    options = dict(batch=args.batch, dtype=args.dtype, layout=args.layout, direction="fwd", arch=device_arch(device))
    shapes = args.shape if isinstance(args.shape, list) else [args.shape]
    try:
        problems = ([ConvProblem.from_key(args.key)] if args.key
                    else [p for shape in shapes for _, p in problems_from_shape(shape, **options)])
        return [(describe_shape(p), with_epilogue(p, args.bias, args.activation)) for p in problems]
    except (LookupError, ValueError) as exc:
        raise UsageError(usage_message(exc)) from None


def in_directions(args: argparse.Namespace, base: list[tuple[str, ConvProblem]],
                  transposed: frozenset[str] = frozenset()) -> list[tuple[str, ConvProblem]]:
    """``base`` cut to ``--layers`` (where the command has it), then each problem in the ``--direction`` asked
    for (``all``: the three; none: its own). ``transposed`` names layers whose directions map onto their
    convolution's (:func:`conv_core.frontend.transposed.layer_direction`), so ``--layers 2 --direction all`` gives six
    problems."""
    from .frontend.transposed import layer_direction

    if getattr(args, "layers", None) is not None:
        base = base[: args.layers]
    if args.direction is None:
        return base
    directions = DIRECTIONS if args.direction == "all" else (args.direction,)
    try:
        return [(name, p.with_direction(layer_direction(d, name in transposed))) for name, p in base
                for d in directions]
    except ValueError as exc:
        raise UsageError(usage_message(exc)) from None


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


def with_epilogue(problem: ConvProblem, bias: bool, activation: str | None) -> ConvProblem:
    """Add the epilogue options given on the command line (never remove a suite's own)."""
    changes = {}
    if bias:
        changes["bias"] = True
    if activation:
        changes["activation"] = activation
    return problem.replace(**changes) if changes else problem


def usage_message(exc: BaseException) -> str:
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
    problems = in_directions(args, shape_problems(args, device))
    explanation = explain(problems[0][1], device=device, backend=args.backend)
    print(json.dumps(explanation.to_dict(), indent=1) if args.json else explanation)
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    """Compile the kernels a model or some shapes will run (each problem's first-ranked candidate, run once)."""
    from . import warmup
    from .arch import device_arch

    device = parse_device(args.device)
    try:
        if args.model:
            problems = warmup.model_problems(args.model, batch=args.batch or 32, dtype=args.dtype, layout=args.layout,
                                             image_size=args.image_size, arch=device_arch(device), fuse=args.fuse)
        else:
            problems = shape_problems(args, device)
    except ImportError as exc:
        raise UsageError(f"--model needs torchvision ({exc})") from None
    except (LookupError, ValueError) as exc:
        raise UsageError(usage_message(exc)) from None
    done = warmup.warmup(problems, device, directions=DIRECTIONS if args.train else ("fwd",), benchmark=args.benchmark)
    print(format_table(("layer", "dir", "kernel", "s"), [(w.name, w.problem.direction, w.kernel_id,
                                                         f"{w.seconds:.2f}") for w in done], align="lllr"))
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


# ---- the parser -------------------------------------------------------------------------------------


def add_problem_options(p: argparse.ArgumentParser, *,
                        all_directions: bool = False) -> argparse._MutuallyExclusiveGroup:
    """The options that pick problems (``explain``'s, and the tooling's ``bench`` and ``tune``, which add
    ``--suite`` to the returned group of choices); ``all_directions``: ``--direction all`` runs the three."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--shape", help='one layer, e.g. "n32 c64 k64 i56x56 f3x3 s1 p1" (or a problem key)')
    which.add_argument("--key", help="a full problem key (ConvProblem.key); --batch, --dtype and --layout are ignored")
    p.add_argument("--batch", type=int, help="batch size (default: the suite's; a shape's own n wins)")
    _add_dtype_and_layout(p)
    directions = (*DIRECTIONS, "all") if all_directions else DIRECTIONS
    p.add_argument("--direction", choices=directions, help="default fwd" + (" (all: the three)" if all_directions
                                                                             else ""))
    p.add_argument("--bias", action="store_true", help="forward problems add a bias")
    p.add_argument("--activation", help="fused activation of forward problems (relu, gelu, silu, ...)")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    return which


def _add_dtype_and_layout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", type=parse_dtype, default="bfloat16", help="bf16 (default), fp16 or fp32")
    p.add_argument("--layout", type=parse_layout, default="channels_last",
                   help="nhwc/channels_last (default) or nchw/channels_first")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conv-core", description="Pluggable convolutions for PyTorch: "
                                     "inspect backends, explain choices, warm up, check backends.")
    parser.add_argument("--version", action="version", version=f"conv-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("backends", help="list backends, their versions and errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("explain", help="show how one problem's candidates are ranked")
    add_problem_options(p)
    p.add_argument("--backend", help="restrict the choice to this backend")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("warmup", help="compile the kernels a model or some shapes will run, before the first call",
                       description="Run each problem of a model (or of the shapes given) once, so that its kernels "
                       "are compiled (and in Triton's disk cache) before the first real call. With --benchmark, each "
                       "problem's candidates are also timed as benchmark mode (CONV_CORE_BENCHMARK=1) times them, and "
                       "the times are kept in the first-use store (CONV_CORE_FIRST_USE_DIR, default "
                       "~/.cache/conv-core/first-use): a later process in benchmark mode on the same GPU, driver "
                       "and versions reads them instead of timing again.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a torchvision model name, e.g. resnet50 (random weights; needs torchvision)")
    which.add_argument("--shape", action="append", help='a layer, e.g. "n32 c64 k64 i56x56 f3x3 s1 p1" (repeatable)')
    p.add_argument("--batch", type=int, help="batch size (default: 32 for a model; a shape's own n wins)")
    p.add_argument("--image-size", type=int, default=224, help="(--model) height and width of the images (224)")
    _add_dtype_and_layout(p)
    p.add_argument("--train", action="store_true", help="the backward problems too (data and weight gradients)")
    p.add_argument("--fuse", action="store_true", help="(--model) convert as convert(model, fuse=True) does")
    p.add_argument("--benchmark", action="store_true",
                   help="rank in benchmark mode (as CONV_CORE_BENCHMARK=1): time each problem's candidates and keep "
                   "the times in the first-use store (CONV_CORE_FIRST_USE_DIR), which later processes in "
                   "benchmark mode read instead of timing again")
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    p.set_defaults(func=cmd_warmup, key=None, bias=False, activation=None)

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

    parser.set_defaults(installed_commands=frozenset(_add_installed_commands(sub)))
    return parser


def _add_installed_commands(sub) -> list[str]:
    """Let every installed package add its subcommands (entry points of :data:`COMMANDS`); returns their names.
    A package whose entry point fails to load is named on stderr, and the others still load."""
    added = []
    for entry in metadata.entry_points(group=COMMANDS):
        try:
            entry.load()(sub)
        except Exception as exc:  # a broken package never breaks the command line
            print(f"conv-core: the subcommand {entry.name!r} of {entry.value} failed to load: {exc}", file=sys.stderr)
            continue
        added.append(entry.name)
    return added


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``conv-core``; returns the exit status (2 for usage errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] in TOOLING_COMMANDS and argv[0] not in parser.get_default("installed_commands"):
        print(f"conv-core {argv[0]}: this subcommand comes with the {TOOLING_COMMANDS[argv[0]]} package, which is "
              f"not installed: pip install {TOOLING_COMMANDS[argv[0]]} (from a checkout of conv: pip install -e "
              f"packages/{TOOLING_COMMANDS[argv[0]]})", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # what a benchmark record names as its command
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
