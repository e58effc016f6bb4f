"""Timing a callable the way every number in this project is taken.

Median of many repetitions, after warm-up, with device events on GPUs and the
L2 cache flushed before each repetition (so a layer is not timed on inputs a
previous repetition left in cache). Used by ``bench``, ``tune``, the sweeps and
the opt-in first-use benchmark; never called on the hot path.

What the events measure is GPU time. The start event is recorded on the stream
before ``fn`` is called, so if the GPU were idle it would fire at once and the
host's time to launch ``fn``'s kernels (Python, argument checks, descriptor
creation: tens of microseconds, and more on a busy host) would count as the
kernel's. A spin kernel of :data:`LEAD_CYCLES` is queued in front of each
repetition, after the flush, so that the GPU is still busy when the host has
finished launching, and a kernel shorter than its launch is not timed as its
launch. A callable that synchronizes with the host drains the
queue itself and so still has its launch gaps counted, which is its real cost.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

_FLUSH_BYTES = 256 * 1024 * 1024
#: GPU clock cycles of the spin kernel queued before each repetition: about 200 us at the H100's
#: 1.98 GHz, longer than any candidate's host-side launch.
LEAD_CYCLES = 400_000


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
        torch.cuda._sleep(LEAD_CYCLES)  # the GPU is busy while the host launches fn (see the module's text)
        start.record()
        fn()
        end.record()
    _sync(device)
    return statistics.median(start.elapsed_time(end) * 1e3 for start, end in events)


def is_capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream (then nothing may be timed)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()
