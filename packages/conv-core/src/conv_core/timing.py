"""Timing a callable the way every number in this project is taken.

Median of many repetitions, after warm-up, with device events on GPUs and the
L2 cache flushed before each repetition (so a layer is not timed on inputs a
previous repetition left in cache). Used by ``bench``, ``tune`` and the opt-in
first-use benchmark; never called on the hot path.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

_FLUSH_BYTES = 256 * 1024 * 1024


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_us(fn: Callable[[], object], device: torch.device | str, *, warmup: int = 3, reps: int = 25,
              flush_cache: bool = True) -> float:
    """Median wall time of ``fn()`` in microseconds."""
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    _sync(device)
    if device.type != "cuda":
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples)
    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if flush_cache else None
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    _sync(device)
    return statistics.median(start.elapsed_time(end) * 1e3 for start, end in events)


def is_capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream (then nothing may be timed)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()
