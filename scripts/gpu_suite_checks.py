"""A backend's candidates checked on realistic sizes: the model suites' layers against float64.

The conformance kit (``conv-core check``) covers edge cases on small problems;
this covers the sizes users run, where tiling, masking and split reductions
meet real extents. Every candidate the backend returns for every suite layer,
direction, dtype and layout is run by ``conv_core.testing.check_candidate``
(poisoned output, operands untouched, bitwise repeatability for candidates
tagged deterministic, float64 reference under the tolerance model).

Usage (on the GPU machine):
    python3 scripts/gpu_suite_checks.py --backend rdna --out DIR \
        [--suites resnet50:8,sd_vae_decoder:1,retinanet_head:1] [--dtypes bf16,fp16] [--layouts nhwc,nchw] \
        [--directions bwd_weight] [--kernels winograd_f4x3_bwd_weight]

Writes ``DIR/suite_checks_<backend>.json`` and prints a table per kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import torch

from conv_core.arch import device_arch
from conv_core.engine import get_engine
from conv_tools.suites import suite_problems
from conv_core.testing import check_candidate

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LAYOUTS = {"nhwc": "channels_last", "nchw": "channels_first"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--suites", default="resnet50:8,sd_vae_decoder:1,retinanet_head:1")
    p.add_argument("--dtypes", default="bf16,fp16")
    p.add_argument("--layouts", default="nhwc,nchw")
    p.add_argument("--directions", default="fwd,bwd_data,bwd_weight")
    p.add_argument("--kernels", default="", help="only these candidate kernels (comma-separated; default: all)")
    return p.parse_args(argv)


def cases(args, device):
    """(suite, layer, problem) for every requested combination."""
    arch = device_arch(device)
    for spec in args.suites.split(","):
        name, _, batch = spec.partition(":")
        for direction in args.directions.split(","):
            for dtype in args.dtypes.split(","):
                for layout in args.layouts.split(","):
                    for layer, problem in suite_problems(name, batch=int(batch) if batch else None,
                                                         dtype=DTYPES[dtype], layout=LAYOUTS[layout],
                                                         direction=direction, arch=arch):
                        yield name, layer, problem


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device("cuda")
    registry = get_engine().registry
    results, start = [], time.time()
    path = f"{args.out}/suite_checks_{args.backend}.json"
    for suite, layer, problem in cases(args, device):
        candidates, declined = registry.candidates(problem, device, only=args.backend)
        if args.kernels:
            candidates = [c for c in candidates if c.kernel in args.kernels.split(",")]
        for candidate in candidates:
            try:
                outcome = check_candidate(problem, candidate, device, seed=1)
                ok, ratio, message = outcome.ok, outcome.worst_ratio, outcome.message
            except Exception as exc:  # a crash is a failure to report, not a reason to stop
                ok, ratio, message = False, float("inf"), f"{type(exc).__name__}: {exc}"
            results.append({"suite": suite, "layer": layer, "problem": problem.key, "kernel": candidate.kernel_id,
                            "ok": ok, "worst_ratio": ratio, "message": message})
        if not candidates:
            results.append({"suite": suite, "layer": layer, "problem": problem.key, "kernel": None, "ok": None,
                            "declined": [d.reason for d in declined]})
        print(f"{time.time() - start:7.1f}s {problem.key}: {len(candidates)} candidates", flush=True)
        with open(path, "w") as f:  # rewritten after every problem, so a time-out keeps what was checked
            json.dump({"device": torch.cuda.get_device_name(), "seconds": time.time() - start, "results": results},
                      f, indent=1)
    return report(results)


def report(results) -> int:
    """One line per (kernel, direction, dtype, layout): cases, failures, worst error/bound."""
    groups = defaultdict(list)
    for r in results:
        if r["kernel"] is None:
            continue
        direction, dtypes, layout = r["problem"].split()[0], r["problem"].split()[10], r["problem"].split()[11]
        groups[(r["kernel"].rsplit(":", 1)[0], direction, dtypes.split(".")[0], layout)].append(r)
    failed = 0
    print(f"{'kernel':32} {'dir':10} {'dtype':5} {'layout':6} {'cases':>5} {'failed':>6} {'worst err/bound':>15}")
    for key in sorted(groups):
        rows = groups[key]
        bad = [r for r in rows if not r["ok"]]
        failed += len(bad)
        worst = max(r["worst_ratio"] for r in rows)
        print(f"{key[0]:32} {key[1]:10} {key[2]:5} {key[3]:6} {len(rows):5d} {len(bad):6d} {worst:15.3g}")
        for r in bad[:3]:
            print(f"    FAILED {r['layer']}: {r['message'][:300]}")
    declined = sum(1 for r in results if r["kernel"] is None)
    print(f"{len(results) - declined} candidate checks, {failed} failed; {declined} problems without a candidate")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
