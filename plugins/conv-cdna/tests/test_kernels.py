"""Every kernel of the registry, once, under Triton's interpreter with each CDNA table's tiles, against float64.

The conformance kit (test_conformance.py) runs problems of at most 20 000 multiply-adds, where several kernels never
apply (Winograd needs 64 channels, the few-channel weight gradients want more pixels than a tiny image has); here
each kernel gets a problem it takes, in the direction and layouts it serves, with the configuration each of gfx90a's,
gfx942's and gfx950's tables picks for it: so every shipped tile family is checked by numbers on CPU (float16), and
on a GPU with ``CONV_CDNA_TEST_DEVICE=cuda`` (float16 and bfloat16, the tables' tiles at the same threads).
"""

from __future__ import annotations

import os

import pytest
import torch
from conv_cdna import candidates, configs
from conv_core.arch import device_arch
from conv_core.problem import ConvProblem
from conv_core.testing import check_candidate
from conv_rdna.api import REGISTRY

DEVICE = torch.device(os.environ.get("CONV_CDNA_TEST_DEVICE", "cpu"))
DTYPES = ("float16",) if DEVICE.type == "cpu" else ("float16", "bfloat16")

#: Small problems, first match per kernel: a general layer, Winograd's smallest, few input and few output channels,
#: a strided one, depthwise, a 1x1 one, a grouped one (6 -> 4 channels a group), one whose filter is its stride.
SHAPES = (
    dict(batch=2, in_channels=24, out_channels=20, input_size=(9, 10), filter_size=(3, 3), padding=1),
    dict(batch=4, in_channels=64, out_channels=64, input_size=(8, 8), filter_size=(3, 3), padding=1),
    dict(batch=2, in_channels=3, out_channels=16, input_size=(12, 12), filter_size=(3, 3), padding=1),
    dict(batch=2, in_channels=16, out_channels=3, input_size=(12, 12), filter_size=(3, 3), padding=1),
    dict(batch=2, in_channels=3, out_channels=16, input_size=(13, 13), filter_size=(3, 3), stride=(2, 2), padding=1),
    dict(batch=2, in_channels=16, out_channels=3, input_size=(13, 13), filter_size=(3, 3), stride=(2, 2), padding=1),
    dict(batch=2, in_channels=16, out_channels=16, input_size=(9, 9), filter_size=(3, 3), padding=1, groups=16),
    dict(batch=2, in_channels=16, out_channels=24, input_size=(7, 9), filter_size=(1, 1)),
    dict(batch=2, in_channels=24, out_channels=16, input_size=(7, 9), filter_size=(3, 3), padding=1, groups=4),
    dict(batch=2, in_channels=12, out_channels=20, input_size=(8, 11), filter_size=(2, 2), stride=(2, 2)),
)


def problem_for(kernel: str, dtype: str) -> ConvProblem:
    entry = REGISTRY[kernel]
    for shape in SHAPES:
        for layout in entry.layouts or ("channels_last", "channels_first"):
            fields = {"stride": (1, 1), "padding": 0, "dilation": (1, 1), "groups": 1, **shape}
            problem = ConvProblem(direction=entry.directions[0], dtype=dtype, layout=layout,
                                  arch=device_arch(DEVICE), **fields)
            if entry.issue(problem) is None:
                return problem
    raise AssertionError(f"no test shape for {kernel}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", configs.TARGETS)
@pytest.mark.parametrize("kernel", REGISTRY.names)
def test_kernel_matches_float64_with_the_tables_tiles(kernel, arch, dtype, monkeypatch):
    monkeypatch.setenv("CONV_CDNA_ARCH", arch)
    problem = problem_for(kernel, dtype)
    (candidate,) = [c for c in candidates.candidates(problem, DEVICE) if c.kernel == kernel]
    result = check_candidate(problem, candidate, DEVICE, seed=3)
    assert result.ok, result
