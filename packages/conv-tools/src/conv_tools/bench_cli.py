"""``conv-core bench``'s benchmarks beyond timing the candidates of layers::

    conv-core bench --model NAME [--batch N --dtype bf16 --layout nhwc --modes eager,train,... --rounds 11
                                  --iterations 4 --attribute --json PATH]
    conv-core bench --host [--device cpu --calls 100 --json PATH]
    conv-core bench --holdout [--models a,b --layers 8 --batch 8 --budget-s 420 --json PATH]
    conv-core bench --report a.json [b.json ...] [--out docs/benchmarks/real-models.md]

Each writes a JSON record that names its command (:mod:`conv_tools.bench_record`); ``--report`` turns
records into the benchmark page (:mod:`conv_tools.bench_page`).
"""

from __future__ import annotations

import argparse
import sys

from conv_core.text_table import format_table

from . import bench_models
from .model_bench_modes import DEFAULT_ROUNDS, MODES


def add_options(p: argparse.ArgumentParser, which: argparse._MutuallyExclusiveGroup) -> None:
    """The choices (in ``which``, beside ``--suite`` / ``--shape`` / ``--key``) and their options."""
    which.add_argument("--model", help=f"run a real model plain and converted, in each mode "
                       f"({', '.join(bench_models.MODELS)}). On a CPU only {', '.join(bench_models.CPU_MODELS)} "
                       "finish in about a minute; the others take many minutes per mode there (the plugins' "
                       "kernels need a GPU, so a CPU run times PyTorch's own convolution)")
    which.add_argument("--host", action="store_true", help="host time per call of F.conv2d and conv_core.conv2d "
                       "(bf16 on a GPU; fp32 and bf16 on the CPU)")
    which.add_argument("--holdout", action="store_true", help="the ranking's picks against aten on layers of "
                       "models in no suite, and on the suites' (--layers: forward layers per model, default 8; "
                       "--batch default 8)")
    which.add_argument("--report", nargs="+", metavar="JSON", help="write the real-model page from the records "
                       "of --model, --host, --holdout and conv_tools.model_bench_ddp")
    g = p.add_argument_group("options of --model, --host, --holdout and --report")
    g.add_argument("--modes", help=f"--model: comma list of {','.join(MODES)} (default: all; CUDA-only modes are "
                   "skipped on the CPU)")
    g.add_argument("--compile-backend", default="inductor", help="--model: torch.compile's backend (default inductor)")
    g.add_argument("--variants", default="plain,conv,fused", help="--model: which of plain,conv,fused to run "
                   "(default all; plain always runs)")
    g.add_argument("--attribute", action="store_true", help="--model: also profile each eager and training mode "
                   "layer by layer (each convolution's host and GPU time plain and converted, its kernels and "
                   "route; the other ops by name), into the record and the page")
    g.add_argument("--rounds", type=_at_least_one, default=DEFAULT_ROUNDS,
                   help="--model: alternating rounds; each ratio is the median over rounds of the round's plain / "
                   "variant, shown with the lowest and highest (default %(default)s)")
    g.add_argument("--iterations", type=_at_least_one, default=4, help="--model: timed iterations per variant in "
                   "each round, after --warmup (default 4)")
    g.add_argument("--models", help="--holdout: comma list of models (default: "
                   f"{','.join(bench_models.HOLDOUT_MODELS)})")
    g.add_argument("--budget-s", type=float, default=420.0, help="--holdout: seconds for the whole run (default 420)")
    g.add_argument("--sets", default="holdout,in_sample", help="--holdout: which problem sets (default both)")
    g.add_argument("--phases", default="default,benchmark", help="--holdout: rankings to judge: default, and "
                   "benchmark (first-use timing, CONV_CORE_BENCHMARK=1) (default both)")
    g.add_argument("--calls", type=int, default=100, help="--host: calls per timed round (default 100)")
    g.add_argument("--out", metavar="PATH", help="--report: the page to write (default: print it)")
    g.add_argument("--title", help="--report: the page's title (default: 'Real models: plain PyTorch against "
                   "conv-core')")


def _at_least_one(text: str) -> int:
    """A count of 1 or more: zero rounds or iterations would give no figure at all."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def chosen(args: argparse.Namespace) -> bool:
    """Whether the command line asked for one of these benchmarks."""
    return bool(args.model or args.host or args.holdout or args.report)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark the command line chose; print its summary, write its record."""
    if args.report:
        return _report(args)
    from conv_core.cli_options import parse_device

    device = parse_device(args.device)
    if args.model:
        record = _model(args, device)
    elif args.host:
        record = _host(args, device)
    else:
        record = _holdout(args, device)
    _finish(args, record)
    return 0


def _usage(message: str):
    from conv_core.cli_options import UsageError

    return UsageError(message)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _finish(args: argparse.Namespace, record: dict) -> None:
    from .bench_record import command_line, stamp, write

    stamp(record, command_line(getattr(args, "argv", None) or ["bench"]))
    if args.json:
        write(record, args.json)


def _checkpoint(args: argparse.Namespace):
    """A function writing the record so far to ``--json`` (None without a file to write), so a run cut short
    by a time limit keeps what it measured."""
    if not args.json or args.json == "-":
        return None
    return lambda record: _finish(args, record)


def _quiet(args: argparse.Namespace) -> bool:
    """Whether standard output is the JSON record (``--json -``), so nothing else may go there."""
    return args.json == "-"


# ---- --model --------------------------------------------------------------------------------------


def _model(args: argparse.Namespace, device) -> dict:
    from .model_bench import VARIANTS, ModelBenchConfig, run_model_bench

    _no_reps(args)
    modes = _choices(args.modes, MODES, "mode") if args.modes else MODES
    variants = _choices(args.variants, VARIANTS, "variant")
    _choices(args.model, bench_models.MODELS, "model")
    if device.type == "cpu" and args.model not in bench_models.CPU_MODELS:
        _log(f"conv-core bench: {args.model} on the CPU takes many minutes per mode (the plugins' kernels need a "
             f"GPU); {', '.join(bench_models.CPU_MODELS)} is the CPU's model. Progress follows.")
    config = ModelBenchConfig(model=args.model, device=str(device), batch=args.batch, dtype=args.dtype,
                              layout=args.layout, modes=modes, rounds=args.rounds, iterations=args.iterations,
                              warmup=args.warmup, compile_backend=args.compile_backend, variants=variants)
    try:
        record = run_model_bench(config, log=_log, checkpoint=_checkpoint(args))
    except bench_models.ModelUnavailable as exc:
        raise _usage(str(exc)) from None
    if args.attribute:
        from .model_attribution import attribute_model

        _log(f"  ... {args.model}: profiling each eager and training mode layer by layer, plain and converted")
        record["attribution"] = attribute_model(config, record["picks"].get("conv"), _log)
    if not _quiet(args):
        print(model_table(record))
    return record


def _no_reps(args: argparse.Namespace) -> None:
    """``--reps`` is the kernel benchmark's; the model benchmark times in rounds, and silently ignoring an old
    command's ``--reps`` would time something other than asked."""
    if any(a == "--reps" or a.startswith("--reps=") for a in getattr(args, "argv", None) or []):
        raise _usage("--model times in alternating rounds: give --rounds N --iterations M instead of --reps")


def _ratio_cell(mode: dict, name: str) -> str | None:
    """``0.898x (0.87-0.93)``: the ratio and its rounds' lowest and highest (just the ratio in an older record)."""
    ratio = mode["ratios"].get(name)
    if ratio is None:
        return None
    spread = mode.get("ratio_spread", {}).get(name)
    return f"{ratio:.3f}x" + (f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else "")


def model_table(record: dict) -> str:
    """The record's modes as a table: times, ratios to plain, output errors; then the picks."""
    def ms(v):
        return f"{v:.3f}" if v is not None else None

    rows = []
    for mode in record["modes"]:
        v = mode["variants"]
        cells = []
        for name in ("plain", "conv", "fused"):
            entry = v.get(name, {})
            cells.append("FAILED" if entry.get("failed") else ms(entry.get("ms")))
        ratios = [_ratio_cell(mode, n) for n in ("conv", "fused")]
        errors = [f"{v[n]['error']:.2g}" if v.get(n, {}).get("error") is not None else None
                  for n in ("plain", "conv", "fused")]
        rows.append((mode["mode"], mode["skipped"], *cells, *ratios, *errors))
    table = format_table(("mode", "skipped", "plain ms", "conv ms", "fused ms", "conv x", "fused x", "err plain",
                          "err conv", "err fused"), rows, align="llrrrrrrrr")
    lines = [f"{record['model']}, batch {record['batch']}, {record['config']['dtype']} {record['config']['layout']} "
             f"(ratio: plain time / variant time, above 1 conv-core is faster; median over rounds, in brackets the "
             f"lowest and highest round's)", table]
    for variant, picks in record.get("picks", {}).items():
        for direction, tally in picks.get("by_backend", {}).items():
            lines.append(f"picks ({variant}, {direction}): "
                         + ", ".join(f"{b} {t['problems']} problems / {t['calls']} calls" for b, t in tally.items()))
    return "\n".join(lines)


# ---- --host, --holdout, --report ---------------------------------------------------------------------


def _host(args: argparse.Namespace, device) -> dict:
    from .bench_host import run_host_bench

    record = run_host_bench(device, calls=args.calls, rounds=args.reps, warmup=args.warmup)
    if not _quiet(args):
        rows = [(r["dtype"], r["layout"], r["what"], r["label"], r["kernel"],
                 f"{r['host_us']:.1f}" if r["host_us"] else None, f"{r['ratio']:.2f}x" if r["ratio"] else None,
                 (r["skipped"] or r["failed"] or "")[:80] or None)
                for r in record["rows"]]
        print(f"host time per call, {record['layer']} on {record['device']}")
        print(format_table(("dtype", "layout", "what", "call", "kernel", "host us", "x F.conv2d", "note"), rows,
                           align="lllllrrl"))
    return record


def _holdout(args: argparse.Namespace, device) -> dict:
    from .bench_holdout import PHASES, SETS, markdown, run_holdout

    models = _choices(args.models, bench_models.MODELS, "model") if args.models else bench_models.HOLDOUT_MODELS
    sets, phases = _choices(args.sets, SETS, "set"), _choices(args.phases, PHASES, "phase")
    try:
        record = run_holdout(device, models=models, batch=args.batch or 8, dtype=args.dtype, layout=args.layout,
                             per_model=args.layers or 8, sets=sets, phases=phases, reps=args.reps, warmup=args.warmup,
                             budget_s=args.budget_s, log=_log, checkpoint=_checkpoint(args))
    except bench_models.ModelUnavailable as exc:
        raise _usage(str(exc)) from None
    if not _quiet(args):
        print(markdown(record))
    return record


def _choices(text: str, known, what: str) -> tuple[str, ...]:
    """The comma list ``text``, each a member of ``known``; a usage error naming the others."""
    chosen = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [v for v in chosen if v not in known]
    if unknown or not chosen:
        raise _usage(f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; {what}s: {', '.join(known)}")
    return chosen


def _report(args: argparse.Namespace) -> int:
    from .bench_page import DEFAULT_TITLE, write_page

    try:
        page = write_page(args.report, args.out, args.title or DEFAULT_TITLE)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    if args.out is None:
        print(page, end="")
    else:
        print(f"wrote {args.out} from {len(args.report)} record(s)")
    return 0
