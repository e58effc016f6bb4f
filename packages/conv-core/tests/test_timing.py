"""conv_core.timing: what a repetition queues on the GPU, in which order (checked with a recording fake of
``torch.cuda``, since CI has no GPU), and the CPU path's median."""

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
        assert cycles == timing.LEAD_CYCLES
        self.calls.append("sleep")


class _Flush:
    def __init__(self, recorder):
        self.recorder = recorder

    def zero_(self):
        self.recorder.calls.append("flush")


def test_each_gpu_repetition_is_flush_then_lead_then_the_timed_call(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "Event", rec.event)
    monkeypatch.setattr(torch.cuda, "_sleep", rec.sleep)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: rec.calls.append("sync"))
    monkeypatch.setattr(timing.torch, "empty", lambda *a, **k: _Flush(rec))

    us = timing.median_us(lambda: rec.calls.append("fn"), "cuda", warmup=1, reps=2)

    assert us == 15.0
    assert rec.calls == ["fn", "sync",
                         "flush", "sleep", "event", "fn", "event",
                         "flush", "sleep", "event", "fn", "event", "sync"]


def test_cpu_timing_is_the_median_of_wall_times(monkeypatch):
    ticks = iter([0.0, 1e-6, 10.0, 10.0 + 5e-6, 20.0, 20.0 + 3e-6])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    assert abs(timing.median_us(lambda: None, "cpu", warmup=0, reps=3) - 3.0) < 1e-6
