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
launch. The spin is at least :data:`LEAD_CYCLES` and at least :data:`LEAD_FACTOR` times the host time of
one call of ``fn`` measured during warm-up: a candidate of three Triton launches spent 150-390 us on the
host, beyond a fixed 200 us spin, and its median moved between 35 and 125 us from one set of repetitions
to the next for 29 us of kernels (the rdna-7 benchmark page). A callable that synchronizes with the host
drains the queue itself and so still has its launch gaps counted, which is its real cost.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

_FLUSH_BYTES = 256 * 1024 * 1024
#: Fewest GPU clock cycles of the spin kernel queued before each repetition: about 200 us at the H100's
#: 1.98 GHz.
LEAD_CYCLES = 400_000
#: The spin lasts at least this many times the host time of one call of the timed function.
LEAD_FACTOR = 3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_us(fn: Callable[[], object], device: torch.device | str, *, warmup: int = 3, reps: int = 25,
              flush_cache: bool = True) -> float:
    """Median wall time of ``fn()`` in microseconds."""
    device = torch.device(device)
    host_us = _warm_up(fn, device, warmup)
    if device.type != "cuda":
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples)
    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if flush_cache else None
    lead = max(LEAD_CYCLES, round(LEAD_FACTOR * host_us * _cycles_per_us(device)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            flush.zero_()
        torch.cuda._sleep(lead)  # the GPU is busy while the host launches fn (see the module's text)
        start.record()
        fn()
        end.record()
    _sync(device)
    return statistics.median(start.elapsed_time(end) * 1e3 for start, end in events)


def _warm_up(fn: Callable[[], object], device: torch.device, warmup: int) -> float:
    """Call ``fn`` ``warmup`` times; the longest host time of a call after the first (which may compile), in
    us, each call starting on an idle device."""
    host_us = 0.0
    for i in range(warmup):
        _sync(device)
        start = time.perf_counter()
        fn()
        if i:
            host_us = max(host_us, (time.perf_counter() - start) * 1e6)
    _sync(device)
    return host_us


@functools.cache
def _cycles_per_us(device: torch.device) -> float:
    """The spin kernel's clock cycles per microsecond on ``device``, measured once."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(LEAD_CYCLES)  # the clocks rise before the measured spin
    start.record()
    torch.cuda._sleep(LEAD_CYCLES)
    end.record()
    _sync(device)
    return LEAD_CYCLES / (start.elapsed_time(end) * 1e3)


#: torch.cuda.is_current_stream_capturing's C function (absent from builds without CUDA): a fused call asks it
_stream_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def is_capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream (then nothing may be timed)."""
    return device.type == "cuda" and _stream_capturing()


#: Most threads for first use's first runs of candidates (one per candidate and core at most).
FIRST_RUN_THREADS = 8


def first_runs_together(runs: list[Callable[[], object]], device: torch.device) -> None:
    """Each of ``runs`` called once, side by side in threads, on ``device``'s current stream: a kernel's first run
    compiles it, in native code and ``ptxas`` that run in parallel (two Triton compiles: 0.55x the time on two
    cores). What a run raises is met again, and recorded, by the timing that follows. CUDA only: Triton's CPU
    interpreter patches its language module per launch, for one thread."""
    if len(runs) >= 2 and device.type == "cuda":
        together(runs, functools.partial(_on, device, torch.cuda.current_stream(device)))


@contextlib.contextmanager
def _on(device: torch.device, stream):
    with torch.cuda.device(device), torch.cuda.stream(stream):
        yield


def together(runs: list[Callable[[], object]], scope: Callable[[], contextlib.AbstractContextManager]) -> None:
    """:func:`first_runs_together`'s threads: each run once inside ``scope()``, its exception dropped."""
    def first(run: Callable[[], object]) -> None:
        with scope():
            try:
                run()
            except Exception:  # timed again after this, where it is recorded
                pass

    with ThreadPoolExecutor(max(1, min(len(runs), FIRST_RUN_THREADS, os.cpu_count() or 1))) as pool:
        list(pool.map(first, runs))
