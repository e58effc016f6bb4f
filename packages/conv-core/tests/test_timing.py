"""conv_core.timing: what a repetition queues on the GPU, in which order, and how long its spin lasts (checked
with a recording fake of ``torch.cuda``, since CI has no GPU), and the CPU path's median."""

from __future__ import annotations

import torch

from conv_core import timing


class _Recorder:
    """Stands in for the CUDA calls ``median_us`` makes and writes down their order."""

    def __init__(self):
        self.calls: list[str] = []

    def event(self, enable_timing: bool = False):
        recorder = self

        class Event:
            def record(self):
                recorder.calls.append("event")

            def elapsed_time(self, end):
                return 0.015  # milliseconds

        return Event()

    def sleep(self, cycles: int):
        self.calls.append(f"sleep {cycles}")


class _Flush:
    def __init__(self, recorder):
        self.recorder = recorder

    def zero_(self):
        self.recorder.calls.append("flush")


def _fake_cuda(monkeypatch, host_us: float) -> _Recorder:
    """A recording ``torch.cuda`` on which every call of the timed function takes ``host_us`` of host time
    and every event pair 15 us (so the spin's clock is ``LEAD_CYCLES / 15`` cycles per us)."""
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "Event", rec.event)
    monkeypatch.setattr(torch.cuda, "_sleep", rec.sleep)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: rec.calls.append("sync"))
    monkeypatch.setattr(timing.torch, "empty", lambda *a, **k: _Flush(rec))
    clock = iter(range(0, 10**9, round(host_us)))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock) * 1e-6)
    timing._cycles_per_us.cache_clear()
    return rec


def test_each_gpu_repetition_is_flush_then_lead_then_the_timed_call(monkeypatch):
    rec = _fake_cuda(monkeypatch, host_us=1)

    us = timing.median_us(lambda: rec.calls.append("fn"), "cuda", warmup=2, reps=2)

    assert us == 15.0
    lead = f"sleep {timing.LEAD_CYCLES}"
    assert rec.calls == ["sync", "fn", "sync", "fn", "sync",
                         lead, "event", lead, "event", "sync",  # the spin's clock, measured once
                         "flush", lead, "event", "fn", "event",
                         "flush", lead, "event", "fn", "event", "sync"]


def test_the_spin_outlasts_a_slow_host_call(monkeypatch):
    """A function whose launch takes 500 us of host time gets a spin of LEAD_FACTOR x 500 us, not 200 us."""
    rec = _fake_cuda(monkeypatch, host_us=500)

    timing.median_us(lambda: rec.calls.append("fn"), "cuda", warmup=2, reps=1)

    cycles = round(timing.LEAD_FACTOR * 500 * timing.LEAD_CYCLES / 15)
    assert rec.calls[-6:] == ["flush", f"sleep {cycles}", "event", "fn", "event", "sync"]
    assert cycles > timing.LEAD_CYCLES


def test_cpu_timing_is_the_median_of_wall_times(monkeypatch):
    ticks = iter([0.0, 1e-6, 10.0, 10.0 + 5e-6, 20.0, 20.0 + 3e-6])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    assert abs(timing.median_us(lambda: None, "cpu", warmup=0, reps=3) - 3.0) < 1e-6
