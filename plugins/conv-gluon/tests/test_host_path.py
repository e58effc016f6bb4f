"""The launch path (every candidate's ``run``) on CPU tensors, with the kernel launches recorded instead of made:
no copy from the host, no synchronisation with it, and the same allocations on every call, also while a CUDA
graph would be captured (the weight copies are then derived on every call, not cached). Those are what a
capture refuses or records wrongly (``Cannot copy between CPU and CUDA tensors during CUDA graph capture`` was a
list of filter taps used as an index); the GPU test (``test_cuda_graphs.py``) captures the real thing."""

from __future__ import annotations

import pytest
import torch
from conv_core.launch_site import LaunchSite
from conv_core.problem import ConvProblem
from conv_core.reference import random_operands
from conv_gluon.registry import REGISTRY
from conv_gluon import configs, launch, plans as plan
from torch.overrides import TorchFunctionMode

TAB = configs.table("sm_90")

#: Functions that make a tensor from host data, move one between devices, or wait for the device.
FROM_HOST = {"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "to", "cuda", "cpu"}
SYNCS = {"item", "tolist", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__"}
#: Functions whose index arguments would be copied from the host if given as Python sequences.
INDEXING = {"__getitem__", "__setitem__", "index_select", "index_put_", "index_put", "take", "gather"}
FACTORIES = {"empty", "empty_strided", "zeros", "ones", "full", "empty_like", "zeros_like"}


def _host_index(value) -> bool:
    """Whether an index holds a Python sequence of ints (a tensor built from host data) or an array."""
    if isinstance(value, tuple):
        return any(_host_index(v) for v in value)
    return isinstance(value, list) or type(value).__module__ == "numpy"


class HostTraffic(TorchFunctionMode):
    """Records what a call would ask of the host (``issues``) and its allocations' sizes (``allocations``)."""

    def __init__(self) -> None:
        super().__init__()
        self.issues: list[str] = []
        self.allocations: list[tuple] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in FROM_HOST or name in SYNCS:
            self.issues.append(name)
        if name in INDEXING and any(_host_index(a) for a in args[1:]):
            self.issues.append(f"{name} with a host index")
        if name in FACTORIES:
            self.allocations.append((name, repr(args), repr(sorted(kwargs.items()))))
        return func(*args, **kwargs)


CASES = {  # padded weight copy; phases and zeroed phases; padded dy, float32 partials and their sum
    "fwd gather, padded weight": (ConvProblem("fwd", 2, 40, 36, (9, 11), 3, 1, 1, 1, bias=True), "fwd_gather"),
    "fwd box": (ConvProblem("fwd", 2, 64, 64, (16, 16), 3, 1, 1, 1), "fwd_box"),
    "fwd rows": (ConvProblem("fwd", 2, 64, 128, (16, 16), 3, 1, 1, 1), "fwd_rows_box"),
    "bwd_data stride 2": (ConvProblem("bwd_data", 2, 40, 72, (13, 12), 3, 2, 1, 1), "bwd_data_gather"),
    "bwd_data 1x1 stride 2": (ConvProblem("bwd_data", 2, 64, 32, (8, 8), 1, 2, 0, 1), "bwd_data_box"),
    "bwd_weight split, padded dy": (ConvProblem("bwd_weight", 8, 64, 36, (32, 32), 3, 1, 1, 1), "bwd_weight_gather"),
    "bwd_weight rows": (ConvProblem("bwd_weight", 8, 64, 64, (32, 32), 3, 1, 1, 1), "bwd_weight_rows_box"),
    "bwd_data 3D stride 2, zeroed depth phases": (ConvProblem("bwd_data", 2, 40, 24, (5, 6, 7), (1, 3, 3), 2,
                                                              (0, 1, 1), 1), "bwd_data_gather"),
    "bwd_weight 3D split": (ConvProblem("bwd_weight", 4, 16, 36, (8, 16, 16), 3, 1, 1, 1), "bwd_weight_gather"),
}


def _run(name: str):
    problem, kernel = CASES[name]
    problem = problem.replace(dtype="bfloat16", weight_dtype="bfloat16", out_dtype="bfloat16", arch="sm_90",
                              layout="channels_last")
    make = {"fwd": plan.make_plan, "bwd_data": plan.make_bwd_data_plan,
            "bwd_weight": plan.make_bwd_weight_plan}[problem.direction]
    p = make(problem, kernel, configs.select(TAB, REGISTRY.family_of(kernel), problem), TAB)
    return problem, p, launch.runner(problem, p)


@pytest.fixture
def launches(monkeypatch) -> list[str]:
    """The kernel launches made, by kernel name (recorded, not made: CPU tensors)."""
    made: list[str] = []
    monkeypatch.setattr(LaunchSite, "_through_jit", lambda site, tensors: made.append(site.kernel.__name__))
    return made


@pytest.mark.parametrize("capturing", [False, True], ids=["eager", "capturing"])
@pytest.mark.parametrize("name", CASES)
def test_a_call_asks_nothing_of_the_host(name, capturing, launches, monkeypatch):
    problem, p, run = _run(name)
    operands = random_operands(problem, torch.device("cpu"), 1)
    run(*operands)  # builds the sites and, eagerly, fills the weight cache
    if capturing:  # inside a capture the weight cache is bypassed: every derivation is recorded in the graph
        monkeypatch.setattr("conv_core.weight_cache.is_capturing", lambda device: True)
    traced = []
    for _ in range(2):
        with HostTraffic() as traffic:
            run(*operands)
        traced.append(traffic)
    assert traced[0].issues == [] and traced[1].issues == []
    assert traced[0].allocations == traced[1].allocations  # the same sizes on every call
    expected = {"fwd": 1, "bwd_data": len(getattr(p, "phases", ())), "bwd_weight": 1 + getattr(p, "split", 0)}
    assert len(launches) == 3 * expected[problem.direction]


def test_the_tracer_sees_what_a_capture_refuses():
    w = torch.randn(6, 3, 3, 3)
    with HostTraffic() as traffic:
        w[:, :, [2, 0]]
        torch.tensor([1, 2])
        w.sum().item()
        w.to("cpu")
    assert traffic.issues == ["__getitem__ with a host index", "tensor", "item", "to"]
