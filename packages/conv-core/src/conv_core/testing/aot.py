"""What every Triton backend's ahead-of-time compile checks share (nothing here imports Triton).

A backend verifies its shipped configurations by compiling them on the CPU for GPUs it does not have
(``triton.compile(ASTSource(...), target=GPUTarget(...))``) and reading the assembly. To compile the
kernel a launch would run, it specializes the arguments as Triton's JIT would (:func:`specialize`);
to read NVIDIA's register and spill figures it parses ``ptxas -v`` (:func:`ptxas_stats`); and it spreads
the compiles over processes (:func:`compile_all`), in a subprocess of its own when its tests run under
Triton's interpreter (:func:`compile_in_subprocess`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

#: Triton's attribute for an argument divisible by 16 (pointers from torch's allocator, integers % 16 == 0).
DIVISIBLE = [["tt.divisibility", 16]]


def scalar_argument(value: int, specialized: bool = True) -> tuple[str, bool]:
    """How Triton's JIT specializes an integer argument: ``("constexpr", False)`` for 1 (compiled in),
    else its type (``i32``, or ``i64`` beyond 32 bits) and whether it is divisible by 16. A parameter the
    kernel lists in ``do_not_specialize`` (``specialized=False``) keeps its type and nothing else."""
    if value == 1 and specialized:
        return "constexpr", False
    return ("i32" if -(2**31) <= value < 2**31 else "i64"), specialized and value % 16 == 0


def specialize(arg_names, pointers: dict[str, tuple[str, bool]], scalars: dict[str, int],
               constexprs: dict[str, object], unspecialized: Collection[str] = ()) -> tuple[dict, dict, dict]:
    """``(signature, constexprs, attrs)`` for ``triton.compile(ASTSource(...))``, as Triton's JIT specializes a
    launch of a kernel with parameters ``arg_names``: ``pointers`` maps the pointer and descriptor arguments to
    their type string and whether they get the divisibility attribute (16-byte aligned, as torch allocates);
    integer ``scalars`` are specialized by :func:`scalar_argument`, but for the names in ``unspecialized``
    (the kernel's ``do_not_specialize``); every other parameter is a constexpr of ``constexprs``."""
    signature, consts, attrs = {}, {}, {}
    for index, name in enumerate(arg_names):
        if name in pointers:
            signature[name], aligned = pointers[name]
            if aligned:
                attrs[(index,)] = DIVISIBLE
        elif name in scalars:
            signature[name], divisible = scalar_argument(scalars[name], name not in unspecialized)
            if signature[name] == "constexpr":
                consts[name] = scalars[name]
            elif divisible:
                attrs[(index,)] = DIVISIBLE
        else:
            signature[name], consts[name] = "constexpr", constexprs[name]
    return signature, consts, attrs


def ptxas_stats(log: str) -> dict[str, int]:
    """Registers, spilled bytes (stores and loads) and stack frame bytes from a ``ptxas -v`` log (-1 where
    the log does not say)."""
    regs = re.search(r"Used (\d+) registers", log)
    spills = [int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    stack = re.search(r"(\d+) bytes stack frame", log)
    return dict(registers=int(regs.group(1)) if regs else -1, spill_bytes=sum(spills) if spills else -1,
                stack_bytes=int(stack.group(1)) if stack else -1)


def compile_all(compile_job: Callable[[object], dict], jobs: Sequence, workers: int) -> list[dict]:
    """``compile_job`` over ``jobs`` in ``workers`` processes (spawned, so nothing of this process's Triton
    state leaks into them); in this process when ``workers <= 1``."""
    if workers <= 1:
        return [compile_job(job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(compile_job, jobs))


def compile_in_subprocess(module: str, out: Path, timeout_s: float) -> list[dict]:
    """The results of ``python -m <module> --jobs N --json out/results.json``, a backend's compile checks, run
    without ``TRITON_INTERPRET`` (a test process that has it set holds interpreted kernels, not JIT ones) and
    with a fresh Triton cache in ``out`` (so that ptxas runs and reports), one compile process per core."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(out / "triton-cache")
    path = out / "results.json"
    done = subprocess.run([sys.executable, "-m", module, "--jobs", str(max(2, os.cpu_count() or 1)), "--json",
                           str(path)], env=env, capture_output=True, text=True, timeout=timeout_s)
    if not path.exists():
        raise RuntimeError(f"{module} wrote no results (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(path.read_text())


def distinct(jobs: Sequence, key: Callable[[object], object]) -> tuple[list, dict[str, int]]:
    """The first job of each distinct ``key(job)`` (a target and a launch's specialization: what one compile
    produces), in order, and how many jobs and distinct compiles there were (``{"jobs": n, "compiles": m}``):
    jobs that compile the same code share one compile."""
    found: dict = {}
    for job in jobs:
        found.setdefault(key(job), job)
    return list(found.values()), {"jobs": len(jobs), "compiles": len(found)}


def compile_failure(result: dict) -> list[str]:
    """The one issue of a job that did not compile (``ok`` false: its ``error``), else none."""
    return [] if result.get("ok") else [f"did not compile: {result.get('error')}"]


def report(results: Sequence[dict], json_path: str | None, header: str, row: Callable[[dict], str],
           problems_of: Callable[[dict], list[str]]) -> int:
    """A compile run's results written to ``json_path`` (if given) and printed, ``header`` then one ``row`` per
    compiled job and ``FAILED`` with the error for the others; the exit status: 1 where any job has a problem."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(list(results), f, indent=0)
    print(header)
    for r in results:
        print(row(r) if r.get("ok") else f"{r['id']} FAILED {r.get('error', '')[:300]}")
    return 1 if any(problems_of(r) for r in results) else 0
