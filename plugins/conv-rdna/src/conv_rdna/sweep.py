"""The offline configuration sweep: measure, then ship the winners as data.

Nothing is tuned at run time (:func:`conv_rdna.configs.select` is a pure function of the problem).
Instead this command, run explicitly on a GPU, times a small space of configurations
(``data/sweep_space.json``) for every layer of the model suites, gates each against the float64
reference first (a wrong configuration is never a winner), and writes the fastest per layer::

    python -m conv_rdna.sweep run --out sweep.json                     # every family, default suites
    python -m conv_rdna.sweep run --families depthwise_fwd,winograd --layouts nhwc --out sweep.json
    python -m conv_rdna.sweep merge sweep.json     # -> data/swept/<arch>.json

``run``'s defaults:

- ``--families``: every family the architecture's sweep space has entries for (:func:`sweep_space`).
- ``--suites``: :data:`DEFAULT_SUITES`, each suite at its benchmark batch, and each swept only for the
  families listed with it: the families for particular layers (:data:`SPECIFIC_FAMILIES`) on every suite
  where they occur (few channels: the ResNet-50 and ConvNeXt stems, the SD-VAE encoder's and decoder's
  image and latent layers; depthwise: ConvNeXt; Winograd: the 3x3 layers of all but ConvNeXt); the
  families for any layer (the general ones) on ResNet-50, the SD-VAE decoder and the RetinaNet head, as
  the shipped sweep of 2026-11-21 ran them. Suites given explicitly (``--suites resnet50:32,convnext_block``)
  are swept for every selected family.
- ``--directions fwd,bwd_data,bwd_weight``, ``--layouts nhwc,nchw``, ``--dtype bf16``, ``--reps 10``.

A whole default run takes longer than one GPU call: split it with ``--families``, ``--layouts`` and
``--directions`` (the output is rewritten after each suite, so a time-out keeps what was done).

Every configuration runs through the same :class:`~conv_core.candidate.Candidate` the backend offers
(:func:`conv_rdna.candidates.candidate`): its ``run`` (Winograd's through the transformed-weight cache,
so its timing is the steady state with ``U`` cached) and its error factor in the gate (Winograd's
transforms round derived operands). ``merge`` writes the winners as exact-layer entries of the
architecture the sweep ran on (read by :func:`conv_rdna.configs.table` on top of ``configs.json``'s
own layers, and marking their families measured); buckets stay the fallback for every other problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch
from conv_core.arch import device_arch
from conv_core.problem import ConvProblem
from conv_core.reference import compare, random_operands
from conv_core.suites import suite_problems
from conv_core.timing import median_us

from . import candidates, configs, plan

LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

#: Families that serve particular layers (few channels, depthwise, Winograd's 3x3): swept by default on every
#: suite where such layers occur. The others serve any layer (the general families, as the first sweep of
#: 2026-11-21 ran them) and are swept by default on its three suites only.
SPECIFIC_FAMILIES = configs.FEW_CHANNELS_FAMILIES + configs.DEPTHWISE_FAMILIES + configs.WINOGRAD_FAMILIES
#: The default ``--suites`` (``name:batch``, the benchmarks' batches) -> the families swept on each.
DEFAULT_SUITES = {
    "resnet50:32": configs.FAMILIES,  # the stem 3 -> 64 7x7/2 (few_channels_in), 3x3 layers (winograd)
    "sd_vae_decoder:1": configs.FAMILIES,  # conv_in 4 -> 512, conv_out 128 -> 3, post_quant_conv 4 -> 4, 3x3
    "retinanet_head:2": configs.FAMILIES,  # 3x3 towers (winograd); no few-channel or depthwise layer
    "sd_vae_encoder:1": SPECIFIC_FAMILIES,  # conv_in 3 -> 128, conv_out 512 -> 8, quant_conv 8 -> 8, 3x3
    "convnext_block:32": SPECIFIC_FAMILIES,  # depthwise 7x7 at 56..7 (96..768 channels), the stem 3 -> 96 4x4/4
}


def _space() -> dict:
    return json.loads(resources.files("conv_rdna").joinpath("data/sweep_space.json").read_text())


def sweep_space(arch: str) -> dict[str, list[dict]]:
    """Configurations to try per family on ``arch`` (raw table entries)."""
    return _space()["archs"][arch]


def parse_config(family: str, raw: dict) -> configs.TileConfig | configs.StencilConfig:
    """A raw entry as the configuration class ``family`` takes (as :func:`conv_rdna.configs.table` parses)."""
    return configs.CONFIG_TYPES.get(family, configs.TileConfig).from_dict(raw)


def space_configs(arch: str, family: str) -> list[configs.TileConfig | configs.StencilConfig]:
    """``family``'s configurations in ``arch``'s sweep space, parsed (none where ``arch`` has no space);
    the ahead-of-time compile checks take them from here (``python -m conv_rdna.aot --sweep-space``)."""
    return [parse_config(family, raw) for raw in _space()["archs"].get(arch, {}).get(family, ())]


def _time_config(problem: ConvProblem, kernel: str, config, tab: configs.ArchTable, device: torch.device,
                 operands: tuple, reps: int) -> dict:
    """Gate one configuration against the reference (with the candidate's error factor), then time it;
    never raises: a configuration that fails to compile, launch or match is just not a winner."""
    row = {"kernel": kernel, "config": config.name, "us": None, "error": None}
    try:
        cand = candidates.candidate(problem, kernel, config, tab, device)
        verdict = compare(problem, cand.run(*operands), operands, candidate=cand)
        if not verdict.ok:
            row["error"] = verdict.message
            return row
        row["us"] = median_us(lambda: cand.run(*operands), device, warmup=2, reps=reps)
        row["config_name"] = cand.config
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return row


def sweep_problem(problem: ConvProblem, device: torch.device, space: dict, reps: int,
                  families=configs.FAMILIES) -> list[dict]:
    """Every (kernel, configuration) of the space that applies to ``problem``, for ``families``, gated and
    timed. Configurations beyond the architecture's shared memory for the problem's dtype are skipped."""
    tab = configs.table_for(problem.arch, interpreted=False)
    limit = configs.shared_memory_limit(tab.name)
    operands = random_operands(problem, device, seed=0)
    rows = []
    for kernel in candidates.kernels_for(problem):
        family = plan.KERNELS[kernel]
        if family not in families:
            continue
        for raw in space.get(family, ()):
            config = parse_config(family, raw)
            if limit is not None and config.shared_bytes(problem.dtype) > limit:
                continue
            rows.append({"family": family, "layer": configs.layer_key(problem), "raw": raw,
                         **_time_config(problem, kernel, config, tab, device, operands, reps)})
    return rows


def suite_problems_for(spec: str, families, directions, layout: str, dtype: str, arch: str,
                       device: torch.device) -> Iterator[ConvProblem]:
    """The layers of suite ``spec`` (``name[:batch]``) in each direction that the backend takes and where
    one of ``families`` has a kernel."""
    name, _, batch = spec.partition(":")
    for direction in directions:
        for _, problem in suite_problems(name, batch=int(batch) if batch else None, dtype=dtype, layout=layout,
                                         direction=direction, arch=arch):
            if candidates.decline_reason(problem, device) is None and any(
                    plan.KERNELS[kernel] in families for kernel in candidates.kernels_for(problem)):
                yield problem


def selection(args, space: dict) -> dict[str, frozenset[str]]:
    """Suite spec -> the families swept on it, from ``run``'s ``--suites`` and ``--families``."""
    families = set(args.families.split(",")) if args.families else set(space)
    unknown = sorted(families - set(configs.FAMILIES))
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(configs.FAMILIES)}")
    suites = DEFAULT_SUITES if args.suites is None else dict.fromkeys(args.suites.split(","), configs.FAMILIES)
    return {spec: frozenset(families & set(suite_families)) for spec, suite_families in suites.items()}


def run(args) -> int:
    device = torch.device("cuda")
    arch = device_arch(device)
    space = sweep_space(arch)
    results, start = [], time.time()
    for layout in args.layouts.split(","):  # layouts outermost: a time-out still leaves whole layouts
        for spec, families in selection(args, space).items():
            for problem in suite_problems_for(spec, families, args.directions.split(","), LAYOUTS[layout],
                                              DTYPES[args.dtype], arch, device):
                results += sweep_problem(problem, device, space, args.reps, families)
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
    """Write the winners into ``data/swept/<arch>.json`` (or ``--into``), on top of the file's earlier winners."""
    data = json.loads(Path(args.results).read_text())
    path = Path(args.into) if args.into else Path(str(configs.swept_path(data["arch"])))
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
    p.add_argument("--families", help="comma list (default: every family of the arch's sweep space)")
    p.add_argument("--suites", help="comma list of name[:batch], each swept for every selected family "
                                    f"(default: {', '.join(DEFAULT_SUITES)}, each for its own families)")
    p.add_argument("--directions", default="fwd,bwd_data,bwd_weight")
    p.add_argument("--layouts", default="nhwc,nchw")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
    p = sub.add_parser("merge", help="write a sweep's winners into data/swept/<arch>.json")
    p.add_argument("results")
    p.add_argument("--into", help="write this file instead of the package's data/swept/<arch>.json")
    p.set_defaults(func=merge)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
