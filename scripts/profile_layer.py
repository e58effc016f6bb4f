"""Run one backend kernel on one layer a few times, for a profiler to watch (the ``profile`` stage of gpu_run.sh).

    python3 scripts/profile_layer.py KERNEL 'LAYER KEY' [--reps 3]

``KERNEL`` is a candidate's kernel name (``few_channels_in``) or its full id (``rdna:few_channels_in:m64...``);
the layer key is ``ConvProblem.key`` as the benchmark reports print it (its architecture is replaced by the
GPU's). The candidate is the one the installed backends offer for the problem, run on random operands;
``ncu --launch-skip`` skips the warm-up runs.
"""

from __future__ import annotations

import argparse

import torch
from conv_core.arch import device_arch
from conv_core.engine import get_engine
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("layer")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    device = torch.device("cuda")
    problem = ConvProblem.from_key(args.layer).replace(arch=device_arch(device))  # the key's arch: any
    candidates, declined = get_engine().registry.candidates(problem, device)
    chosen = [c for c in candidates if args.kernel in (c.kernel, c.kernel_id)]
    if not chosen:
        raise SystemExit(f"no candidate {args.kernel} for {problem.key}: offered {[c.kernel_id for c in candidates]}, "
                         f"declined {[d.reason for d in declined]}")
    operands = random_operands(problem, device)
    for _ in range(args.reps):
        chosen[0].run(*operands)
    torch.cuda.synchronize()
    print(f"ran {chosen[0].kernel_id} on {problem.key} {args.reps} times")


if __name__ == "__main__":
    main()
