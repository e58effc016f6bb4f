"""The offline configuration sweep: measure, then ship the winners as data.

Nothing is tuned at run time (:func:`conv_rdna.configs.select` is a pure function of the problem).
Instead this command, run explicitly on a GPU, times a small space of tile configurations
(``data/sweep_space.json``) for every layer of the model suites, gates each against the float64
reference first (a wrong configuration is never a winner), and writes the fastest per layer::

    python -m conv_rdna.sweep run --suites resnet50:32,sd_vae_decoder:1 --out sweep.json
    python -m conv_rdna.sweep merge sweep.json     # -> data/swept/<arch>.json

``merge`` writes the winners as exact-layer entries of the architecture the sweep ran on (read by
:func:`conv_rdna.configs.table` on top of ``configs.json``'s own layers, and marking the table
measured); buckets stay the fallback for every other problem.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from importlib import resources
from pathlib import Path

import torch
from conv_core.arch import device_arch
from conv_core.reference import compare, random_operands
from conv_core.suites import suite_problems
from conv_core.timing import median_us

from . import candidates, configs, launch, plan

LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def sweep_space(arch: str) -> dict[str, list[dict]]:
    """Configurations to try per family on ``arch`` (raw table entries)."""
    raw = json.loads(resources.files("conv_rdna").joinpath("data/sweep_space.json").read_text())
    return raw["archs"][arch]


def _time_config(problem, kernel: str, config: configs.TileConfig, tab, device, operands, reps: int) -> dict:
    """Gate one configuration against the reference, then time it; never raises."""
    row = {"kernel": kernel, "config": config.name, "us": None, "error": None}
    try:
        p = plan.make_plan(problem, kernel, config, tab)
        run = functools.partial(launch.run, problem, p, *operands)
        verdict = compare(problem, run(), operands)
        if not verdict.ok:
            row["error"] = verdict.message
            return row
        row["us"] = median_us(run, device, warmup=2, reps=reps)
        row["config_name"] = p.config_name
    except Exception as exc:  # a configuration that fails to compile or launch is just not a winner
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return row


def sweep_problem(problem, device, space: dict, reps: int) -> list[dict]:
    """Every (kernel, configuration) of the space that applies to ``problem``, gated and timed."""
    tab = configs.table_for(problem.arch, interpreted=False)
    limit = configs.shared_memory_limit(tab.name)
    operands = random_operands(problem, device, seed=0)
    rows = []
    for kernel in candidates.kernels_for(problem):
        family = plan.KERNELS[kernel]
        for raw in space.get(family, ()):
            config = configs.TileConfig.from_dict(raw)
            if limit is not None and config.shared_bytes(problem.dtype) > limit:
                continue
            rows.append({"family": family, "layer": configs.layer_key(problem), "raw": raw,
                         **_time_config(problem, kernel, config, tab, device, operands, reps)})
    return rows


def run(args) -> int:
    device = torch.device("cuda")
    arch = device_arch(device)
    space = sweep_space(arch)
    results, start = [], time.time()
    for layout in args.layouts.split(","):  # layouts outermost: a time-out still leaves whole layouts
        for spec in args.suites.split(","):
            name, _, batch = spec.partition(":")
            for direction in args.directions.split(","):
                for _, problem in suite_problems(name, batch=int(batch) if batch else None,
                                                     dtype=DTYPES[args.dtype], layout=LAYOUTS[layout],
                                                     direction=direction, arch=arch):
                    if candidates.decline_reason(problem, device) is None:
                        results += sweep_problem(problem, device, space, args.reps)
            print(f"{time.time() - start:7.1f}s {layout} {spec} done ({len(results)} timings)", flush=True)
            Path(args.out).write_text(json.dumps({"arch": arch, "device": torch.cuda.get_device_name(),
                                                  "results": results}, indent=1))
    return 0


def winners(results: list[dict]) -> dict[str, dict[str, dict]]:
    """family -> layer key -> the fastest correct configuration (the deterministic kernel's, for bwd_weight)."""
    best: dict[tuple[str, str], dict] = {}
    for row in results:
        if row["us"] is None or row["kernel"] == "bwd_weight_atomic":
            continue
        key = (row["family"], row["layer"])
        if key not in best or row["us"] < best[key]["us"]:
            best[key] = row
    table: dict[str, dict[str, dict]] = {}
    for (family, layer), row in sorted(best.items()):
        table.setdefault(family, {})[layer] = row["raw"]
    return table


def merge(args) -> int:
    """Write the winners into ``data/swept/<arch>.json``, on top of the file's earlier winners."""
    data = json.loads(Path(args.results).read_text())
    path = Path(str(configs.swept_path(data["arch"])))
    swept = json.loads(path.read_text()) if path.is_file() else {"layers": {}}
    for family, layers in winners(data["results"]).items():
        swept["layers"].setdefault(family, {}).update(layers)
    swept.update({"_doc": "Exact-layer winners of the offline sweep (python -m conv_rdna.sweep); read by configs.py.",
                  "arch": data["arch"], "device": data["device"], "measured": True})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(swept, indent=1, sort_keys=True) + "\n")
    print(f"merged into {path} ({data['arch']}, {data['device']}): "
          f"{ {f: len(v) for f, v in swept['layers'].items()} }")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_rdna.sweep", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="time the sweep space on this GPU")
    p.add_argument("--suites", default="resnet50:32,sd_vae_decoder:1,retinanet_head:2")
    p.add_argument("--directions", default="fwd,bwd_data,bwd_weight")
    p.add_argument("--layouts", default="nhwc,nchw")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
    p = sub.add_parser("merge", help="write a sweep's winners into data/configs.json")
    p.add_argument("results")
    p.set_defaults(func=merge)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
