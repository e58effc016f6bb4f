"""What every Triton backend's ahead-of-time compile checks share (nothing here imports Triton).

A backend verifies its shipped configurations by compiling them on the CPU for GPUs it does not have
(``triton.compile(ASTSource(...), target=GPUTarget(...))``) and reading the assembly. To compile the
kernel a launch would run, it specializes the arguments as Triton's JIT would (:func:`scalar_argument`);
to read NVIDIA's register and spill figures it parses ``ptxas -v`` (:func:`ptxas_stats`); and it spreads
the compiles over processes (:func:`compile_all`).
"""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

#: Triton's attribute for an argument divisible by 16 (pointers from torch's allocator, integers % 16 == 0).
DIVISIBLE = [["tt.divisibility", 16]]


def scalar_argument(value: int) -> tuple[str, bool]:
    """How Triton's JIT specializes an integer argument: ``("constexpr", False)`` for 1 (compiled in),
    else its type (``i32``, or ``i64`` beyond 32 bits) and whether it is divisible by 16."""
    if value == 1:
        return "constexpr", False
    return ("i32" if -(2**31) <= value < 2**31 else "i64"), value % 16 == 0


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
