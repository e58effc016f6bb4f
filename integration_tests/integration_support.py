"""Constants and small helpers shared by the integration tests (imported as a plain module)."""

from __future__ import annotations

import torch

import conv_core
from conv_core import activations
from conv_core import ConvProblem
from conv_core.plugins import Backend

CPU = torch.device("cpu")

EXAMPLE = "example"
EXAMPLE_KERNEL = "example:im2col_mm:f32"
ATEN_KERNEL = "aten:native:default"

#: Entry-point name -> module, for every backend package the integration tests install.
ENTRY_POINTS = {
    "example": "conv_example.hooks",
    "broken_import": "conv_broken_import.hooks",
    "broken_hook": "conv_broken_hook.hooks",
    "broken_candidate": "conv_broken_candidate.hooks",
    "broken_run": "conv_broken_run.hooks",
    "misspelled_hook": "conv_misspelled_hook.hooks",
}

#: The one problem conv-example's shipped table (tables/cpu.json) has a time for.
TABLE_PROBLEM_KEY = "fwd n1 c3 k8 g1 i12x12 f3x3 s1x1 p1.1x1.1 d1x1 f32.f32.f32 cf b0 a- cpu"


def small_problem(**changes) -> ConvProblem:
    """A small 2D forward CPU problem the example backend accepts (batch 4: no broken_candidate special case)."""
    fields = dict(direction="fwd", batch=4, in_channels=4, out_channels=6, input_size=(10, 9), filter_size=(3, 3),
                  stride=1, padding=1, dilation=1)
    fields.update(changes)
    return ConvProblem(**fields)


def backend(name: str) -> Backend:
    """The registry entry of backend ``name`` in the current engine; fails the test if absent."""
    found = conv_core.get_engine().registry.get(name)
    assert found is not None, f"backend {name!r} not in {[b.name for b in conv_core.get_engine().registry.backends()]}"
    return found


def call_args(problem: ConvProblem) -> dict:
    """Keyword arguments of a ``conv_core.conv*d`` call for ``problem``."""
    return dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation, groups=problem.groups,
                activation=problem.activation, out_dtype=problem.out_dtype)


def torch_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, problem: ConvProblem) -> torch.Tensor:
    """PyTorch's float64 answer for a forward ``problem`` (asymmetric padding applied explicitly)."""
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[problem.ndim]
    padded = torch.nn.functional.pad(x.double(), [v for pair in reversed(problem.padding) for v in pair])
    y = conv(padded, w.double(), None if bias is None else bias.double(), problem.stride, 0, problem.dilation,
             problem.groups)
    return activations.apply(problem.activation, y)
