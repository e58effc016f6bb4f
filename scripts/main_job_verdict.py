"""The closing lines of ``./run.sh``: what ran, on which device, what it found, and what to do next.

A newcomer reads the last lines of a command first. The main job's tables say a great deal to someone who
knows the project; these lines say it to someone who does not: whether conv-core works on this machine,
whether it made the model faster (and why not, on a CPU), and where to go from here. They are read from the
JSON records the job's commands wrote (``conv-core backends --json``, ``conv-core bench --json``), never
from its printed tables.

Usage: ``python scripts/main_job_verdict.py --backends B.json --layers L.json [--model M.json]``. The last
line starts with ``run.sh: verdict:``. Exit 1 when a result was outside its tolerance or a backend failed to
load: the job then did not show that conv-core works here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

PREFIX = "run.sh:"
GPU_FIGURES = "docs/benchmarks/real-models.md"
USER_GUIDE = "docs/user-guide.md"
#: What a CPU run shows, and why a converted model is not faster there.
CPU_EXPECTED = ("expected on a CPU: the plugins' kernels are GPU kernels, so every call here runs PyTorch's own "
                "convolution and conv-core adds a lookup to it; a converted model runs about as fast as plain "
                "PyTorch or somewhat slower (a small model's calls are short, so the lookup shows).")


def load(path: str | None):
    if path is None:
        return None
    with open(path) as f:
        return json.load(f)


def device_words(layers: dict, model: dict | None) -> str:
    """The device, as a user names it: the GPU's name, or the CPU with its cores."""
    if layers["device"].startswith("cpu"):
        devices = ((model or {}).get("environment") or {}).get("devices") or [{}]
        name, cores = devices[0].get("name", "cpu"), devices[0].get("cores")
        return f"the CPU ({name}{f', {cores} cores' if cores else ''}; no GPU found)"
    return f"{layers['device_name']} ({layers['arch']})"


def backends_line(backends: list[dict]) -> tuple[str, list[str]]:
    """'aten, rdna, ...' and the names of those that failed to load."""
    failed = [b["name"] for b in backends if b["status"] != "ok"]
    names = ", ".join(b["name"] for b in backends if b["status"] == "ok")
    return names, failed


def layers_line(layers: dict) -> str:
    summary = layers["summary"]
    picks = Counter((row.get("picked") or "none").split(":")[0] for row in layers["rows"])
    who = ", ".join(f"{name} {count}" for name, count in sorted(picks.items()))
    return (f"{summary['problems']} ResNet-50 layers timed: the ranking picked {who}; picks vs aten (PyTorch's "
            f"convolution), geomean {summary['geomean_pick_speedup']:.2f}x; {summary['errors']} candidate errors")


def speed_words(mode: dict) -> str:
    """The converted model's speed against plain, with the lowest and highest round's where the record has them
    (a figure from one noisy stretch of a shared machine reads as firmer than it is)."""
    ratio = mode["ratios"].get("conv")
    if not ratio:
        return "no time (failed)"
    spread = (mode.get("ratio_spread") or {}).get("conv")
    rounds = f" (rounds {spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
    return f"{ratio:.2f}x plain PyTorch's speed{rounds}"


def model_lines(model: dict) -> tuple[list[str], bool]:
    """One line per mode (converted time against plain, above 1x faster), and whether every output was right."""
    config = model["config"]
    lines, right = [], True
    for mode in model["modes"]:
        if mode.get("skipped"):
            lines.append(f"{mode['mode']}: skipped ({mode['skipped']})")
            continue
        ok = all(mode.get("within_tolerance", {}).values())
        right = right and ok
        lines.append(f"{mode['mode']}: converted model at {speed_words(mode)}; outputs "
                     f"{'within tolerance' if ok else 'OUTSIDE TOLERANCE'}")
    head = (f"model {model['model']} (batch {model['batch']}, {config['dtype']}, {config['layout']}), "
            "plain and converted in one process:")
    return [head, *("  " + line for line in lines)], right


def verdict(backends: list[dict], layers: dict, model: dict | None) -> tuple[list[str], int]:
    """The closing lines and the exit status."""
    on_cpu = layers["device"].startswith("cpu")
    names, failed = backends_line(backends)
    lines = [f"ran on {device_words(layers, model)}: conv-core with the backends {names}"
             + (f"; FAILED TO LOAD: {', '.join(failed)}" if failed else ""),
             layers_line(layers)]
    right = True
    if model is not None:
        found, right = model_lines(model)
        lines += found
    else:
        lines.append("no real model ran: torchvision is not installed (pip install torchvision)")
    if on_cpu:
        lines.append(CPU_EXPECTED)
        lines.append(f"GPU figures (H100/H200): {GPU_FIGURES}; run ./run.sh on a machine with a GPU to see your own.")
    else:
        slower = [m["mode"] for m in (model or {}).get("modes", []) if (m.get("ratios") or {}).get("conv", 1) < 0.97]
        if slower:
            lines.append(f"the converted model ran slower than plain PyTorch here ({', '.join(slower)}): known, and "
                         f"being worked on; {GPU_FIGURES} shows where each model loses.")
        lines.append(f"compare with the figures on {GPU_FIGURES}.")
    lines.append(f"next: convert your own model (conv_core.convert(model)) and read {USER_GUIDE}; "
                 "`.venv/bin/conv-core --help` lists the tools.")
    if failed or not right:
        what = "a backend failed to load" if failed else "a result was outside its tolerance"
        lines.append(f"verdict: FAILED: {what}; run `.venv/bin/conv-core info` and file an issue with its "
                     "output and these lines.")
        return [f"{PREFIX} {line}" for line in lines], 1
    where = "on this CPU (GPU kernels need a GPU)" if on_cpu else "on this GPU"
    lines.append(f"verdict: OK: conv-core is installed, its backends load and its results are right {where}.")
    return [f"{PREFIX} {line}" for line in lines], 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", required=True, help="conv-core backends --json output")
    parser.add_argument("--layers", required=True, help="conv-core bench --suite ... --json output")
    parser.add_argument("--model", help="conv-core bench --model ... --json output (absent: none ran)")
    args = parser.parse_args(argv)
    lines, status = verdict(load(args.backends), load(args.layers), load(args.model))
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
