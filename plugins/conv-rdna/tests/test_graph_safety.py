"""Every candidate is safe to capture in a CUDA graph: after its first call, a call copies nothing between
host and device, never waits for the device, and allocates the same memory every time.

A CUDA graph replays the device work of the captured call and nothing of its host work: a host-to-device
copy made per call would replay stale data, a synchronisation fails the capture, an allocation of another
size breaks the graph's memory pool. Here the launches are made no-ops (no kernel runs, so the test is fast
and needs no GPU) and every PyTorch operation a call makes is recorded, with Python's ``torch.tensor``,
``Tensor.to`` and ``Tensor.copy_`` traced as well. The first call may fill the weight caches (a repacked or
transformed weight: device work, recorded in a graph if captured); the second and third must match and
hold no copy.
"""

from __future__ import annotations

import pytest
import torch
from conv_core.candidate import Candidate
from conv_core.launch_site import LaunchSite
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_rdna import candidates, registry
from torch.utils._python_dispatch import TorchDispatchMode

CPU = torch.device("cpu")

#: Operations that move data between tensors (a copy, a transfer between devices, a tensor made from host
#: values) or read a device value on the host (a synchronisation).
FORBIDDEN = ("copy", "lift_fresh", "_local_scalar_dense", "item", "nonzero", "is_nonzero", "equal")

#: Layers whose candidates together are every kernel of the plugin (test_every_kernel_is_covered).
LAYERS = {
    "3x3": dict(in_channels=64, out_channels=64, input_size=(12, 12), filter_size=3, padding=1),
    "3x3/2": dict(in_channels=16, out_channels=32, input_size=(12, 12), filter_size=3, stride=2, padding=1),
    "1x1": dict(in_channels=16, out_channels=32, input_size=(8, 8), filter_size=1),
    "1x1/2": dict(in_channels=16, out_channels=32, input_size=(9, 9), filter_size=1, stride=2),
    "stem": dict(in_channels=3, out_channels=16, input_size=(16, 16), filter_size=7, stride=2, padding=3),
    "image in": dict(in_channels=3, out_channels=16, input_size=(12, 12), filter_size=3, padding=1),
    "image out": dict(in_channels=16, out_channels=3, input_size=(12, 12), filter_size=3, padding=1),
    "depthwise": dict(in_channels=16, out_channels=16, input_size=(12, 12), filter_size=3, padding=1, groups=16),
    "grouped": dict(in_channels=16, out_channels=16, input_size=(12, 12), filter_size=3, padding=1, groups=4),
    "2x2/2 (up-convolution)": dict(in_channels=16, out_channels=32, input_size=(12, 12), filter_size=2, stride=2),
}
PROBLEMS = {f"{name} {direction} {layout[:8]}": ConvProblem(
    "fwd", **{"batch": 2, "stride": 1, "padding": 0, "dilation": 1, "dtype": "float16", "layout": layout, **fields},
).with_direction(direction) for name, fields in LAYERS.items() for direction in ("fwd", "bwd_data", "bwd_weight")
    for layout in ("channels_last", "channels_first")}


class _Recorder(TorchDispatchMode):
    """The name and argument shapes of every operation run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args
                       if isinstance(a, torch.Tensor | int | list | tuple))
        self.ops.append((func.name(), shapes, str(kwargs.get("dtype")) if kwargs else None))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def no_launches(monkeypatch):
    monkeypatch.setattr(LaunchSite, "__call__", lambda self, tensors: None)


@pytest.fixture
def python_copies(monkeypatch):
    """Calls of ``torch.tensor``, ``Tensor.to`` and ``Tensor.copy_`` from Python."""
    calls = []
    for owner, name in ((torch, "tensor"), (torch.Tensor, "to"), (torch.Tensor, "copy_")):
        original = getattr(owner, name)

        def traced(*args, __original=original, __name=name, **kwargs):
            calls.append(__name)
            return __original(*args, **kwargs)

        monkeypatch.setattr(owner, name, traced)
    return calls


def _candidates(problem: ConvProblem) -> list[Candidate]:
    return [c for c in candidates.candidates(problem, CPU) if isinstance(c, Candidate)]


def _recorded(candidate: Candidate, operands: tuple) -> list[tuple]:
    with _Recorder() as recorder:
        candidate.run(*operands)
    return recorder.ops


@pytest.mark.parametrize("name", PROBLEMS)
def test_later_calls_copy_nothing_and_allocate_alike(name, no_launches, python_copies):
    problem = PROBLEMS[name]
    for candidate in _candidates(problem):
        operands = random_operands(problem, CPU, 0)
        candidate.run(*operands)  # the first call fills the weight caches
        python_copies.clear()
        second, third = _recorded(candidate, operands), _recorded(candidate, operands)
        assert python_copies == [], (candidate.kernel_id, python_copies)
        assert [op for op in second if any(word in op[0] for word in FORBIDDEN)] == [], candidate.kernel_id
        assert second == third, candidate.kernel_id


def test_the_recorder_sees_a_copy_and_a_synchronisation():
    """The checks above can fail: a host value read and a copy are recorded."""
    x = torch.ones(4)
    with _Recorder() as recorder:
        x.sum().item()
        torch.empty(4).copy_(x)
    names = [op[0] for op in recorder.ops]
    assert any("_local_scalar_dense" in n for n in names) and any("copy" in n for n in names)


def test_every_kernel_is_covered():
    seen = {c.kernel_id.split(":")[1] for problem in PROBLEMS.values() for c in _candidates(problem)}
    assert seen == set(registry.REGISTRY.names)
