"""The candidates hook: which kernels, which declines (limits included), tags and estimates."""

from __future__ import annotations

import math
from pathlib import Path

import conv_core
import pytest
import torch
from conv_core.backends import aten
from conv_core.candidate import Candidate
from conv_core.problem import ConvProblem
from conv_core.kit.declines import INT32_ELEMENTS
from conv_core.kit.registry import readme_table
from conv_core.testing.plugin_checks import the_decline
from conv_rdna import candidates, configs, hooks, registry

README = Path(__file__).parents[1] / "README.md"

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # the hook only reads the device type: no GPU needed


def problem(direction="fwd", arch="cpu", **fields) -> ConvProblem:
    # 16 channels: 8 or fewer would add the few-channel kernels (tested in test_few_channels.py)
    base = dict(batch=2, in_channels=16, out_channels=16, input_size=(10, 10), filter_size=3, stride=1, padding=1,
                dilation=1, dtype="float16", arch=arch)
    return ConvProblem("fwd", **{**base, **fields}).with_direction(direction)


def answer(p: ConvProblem, device=CPU) -> list:
    return candidates.candidates(p, device)


def declined(p: ConvProblem, device=CPU) -> str:
    return the_decline(answer(p, device))


@pytest.fixture(autouse=True)
def cpu_candidates(monkeypatch):
    """CPU problems get candidates only where kernels are interpreted: also in a CUDA run of this file, where
    nothing here launches a kernel (a test that wants the GPU answer sets the variable itself)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_backend_loads_through_its_entry_point():
    backend = conv_core.get_engine().registry.get("rdna")
    assert backend is not None and backend.ok, getattr(backend, "load_error", None)
    info = hooks.conv_core_backend_info()
    assert info.name == "rdna" and {"gfx1100", "gfx1151", "gfx1200", "gfx1201", "sm_90"} <= set(info.targets)
    tables = list(hooks.conv_core_tuning_tables())
    assert [t.name for t in tables] == ["rdna_sm_90.json"] and all(t.is_file() for t in tables)


@pytest.mark.parametrize("p, kernels", [  # channels-first problems (ConvProblem's default layout)
    (problem(), ["implicit_gemm", "conv3x3", "implicit_gemm_cf"]),
    (problem(layout="channels_last"), ["implicit_gemm", "conv3x3"]),
    (problem(filter_size=(3, 5), padding=1), ["implicit_gemm", "implicit_gemm_cf"]),
    (problem(filter_size=1, padding=0), ["implicit_gemm", "gemm1x1", "implicit_gemm_cf"]),
    (problem(filter_size=1, padding=0, stride=2), ["implicit_gemm", "implicit_gemm_cf"]),
    (problem(filter_size=1, padding=((0, 1), (0, 0))), ["implicit_gemm", "implicit_gemm_cf"]),
    (problem("bwd_data"), ["bwd_data_phased", "conv3x3", "bwd_data_cf"]),
    (problem("bwd_data", stride=2), ["bwd_data_phased", "bwd_data_cf"]),
    (problem("bwd_data", filter_size=1, padding=0, stride=2), ["bwd_data_phased", "bwd_data_cf"]),  # zeros first
    (problem("bwd_data", filter_size=1, padding=0), ["bwd_data_phased", "gemm1x1", "bwd_data_cf"]),
    (problem("bwd_weight"), ["bwd_weight_split", "bwd_weight_atomic", "bwd_weight_cf"]),
    (problem("bwd_weight", layout="channels_last"), ["bwd_weight_split", "bwd_weight_atomic"]),
    (problem(input_size=(30,), filter_size=5, padding=2), ["implicit_gemm", "implicit_gemm_cf"]),
    # 3D: the families with a depth axis, in either layout (channels-first through the general kernels' strides)
    (problem(input_size=(4, 6, 6)), ["implicit_gemm"]),
    (problem(input_size=(4, 6, 6), filter_size=1, padding=0), ["implicit_gemm", "gemm1x1"]),
    (problem("bwd_data", input_size=(4, 6, 6), stride=2, layout="channels_last"), ["bwd_data_phased"]),
    (problem("bwd_data", input_size=(4, 6, 6), filter_size=1, padding=0), ["bwd_data_phased", "gemm1x1"]),
    (problem("bwd_weight", input_size=(4, 6, 6)), ["bwd_weight_split", "bwd_weight_atomic"]),
    (problem("bwd_weight", input_size=(4, 6, 6), groups=16), ["depthwise_bwd_weight"]),
])
def test_kernels_offered(p, kernels):
    assert [c.kernel for c in answer(p)] == kernels


def test_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert declined(problem()) == "Triton kernels need a GPU; set TRITON_INTERPRET=1 to interpret them on CPU"


def test_1d_2d_kernels_decline_3d_naming_where_it_runs():
    """The families without a depth axis say so, and which kernels take the problem instead."""
    issues = registry.REGISTRY.issues(problem(input_size=(4, 6, 6), layout="channels_first"))
    for kernel in ("conv3x3", "implicit_gemm_cf", "few_channels_in", "winograd_f4x3"):
        assert "3D convolutions are not this kernel's (1D/2D are)" in issues[kernel]
        assert "the implicit GEMM" in issues[kernel] and "channels-first tensors too" in issues[kernel]


@pytest.mark.parametrize("p, device, words", [
    (problem(dtype="float64"), CPU, "float64 is not supported"),
    (problem(weight_dtype="float32"), CPU, "mixed operands"),
    (problem(out_dtype="float64"), CPU, "result dtype float64"),
    (problem(), torch.device("meta"), "device type 'meta'"),
])
def test_declines_with_a_reason(p, device, words):
    assert words in declined(p, device)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_tensors_beyond_32_bit_offsets_are_declined(direction):
    big = problem(direction, batch=1024, in_channels=256, out_channels=64, input_size=(128, 128))  # 4.3e9 inputs
    assert "32-bit offsets" in declined(big, CUDA)
    fits = problem(direction, batch=64, in_channels=256, out_channels=64, input_size=(128, 128))  # 2.7e8
    assert all(isinstance(c, Candidate) for c in answer(fits.replace(arch="gfx1100"), CUDA))


def test_weight_beyond_32_bit_offsets_is_declined():
    huge = problem(in_channels=16384, out_channels=16384, input_size=(16, 16), filter_size=(3, 3))  # 2.4e9 weights
    assert "the weight has" in declined(huge, CUDA)


def test_grid_limit_on_groups_and_phases():
    grouped = dict(in_channels=20000, out_channels=20000, groups=20000, input_size=(4, 4), stride=2)
    assert isinstance(answer(problem(**grouped))[0], Candidate)
    assert "grid limit" in declined(problem("bwd_data", **grouped))  # 20000 groups x 4 stride phases
    assert "grid limit" in declined(problem(**{**grouped, "in_channels": 70000, "out_channels": 70000,
                                              "groups": 70000}))


def test_weight_gradient_workspace_stays_addressable():
    p = problem("bwd_weight", arch="gfx1100", batch=256, in_channels=2048, out_channels=2048, input_size=(14, 14))
    for c in answer(p, CUDA):
        assert c.workspace_bytes // 4 <= INT32_ELEMENTS


def test_tags_on_the_cpu():
    for p in (problem(), problem("bwd_data"), problem("bwd_weight", batch=4)):
        for c in answer(p):
            assert "interpreted" in c.tags and "cuda_graph_safe" not in c.tags and "experimental" not in c.tags
            assert ("atomics" in c.tags) == (c.kernel == "bwd_weight_atomic")
            assert ("deterministic" in c.tags) != ("atomics" in c.tags)
            assert ("needs_workspace" in c.tags) == (c.workspace_bytes > 0)
            assert "tf32" not in c.tags


def test_tags_on_a_gpu():
    p = problem("bwd_weight", arch="gfx1201", batch=32, in_channels=64, out_channels=64, input_size=(56, 56),
                layout="channels_last")
    split, atomic, wino = answer(p, CUDA)
    assert wino.kernel == "winograd_f4x3_bwd_weight" and {"deterministic", "needs_workspace"} <= wino.tags
    assert {"deterministic", "needs_workspace", "cuda_graph_safe", "experimental"} <= split.tags
    assert split.workspace_bytes == 4 * int(split.config.rsplit("x", 1)[1]) * math.prod(p.weight_shape)
    assert {"atomics", "cuda_graph_safe", "needs_workspace"} <= atomic.tags and "deterministic" not in atomic.tags
    assert atomic.workspace_bytes == 4 * math.prod(p.weight_shape)  # the float32 buffer of an fp16 result


def test_interpreted_candidates_never_beat_aten_on_the_cpu():
    for p in (problem(), problem(filter_size=1, padding=0, batch=64, in_channels=256, out_channels=256),
              problem("bwd_weight", batch=32, input_size=(56, 56))):
        (native,) = aten.conv_core_candidates(p, CPU)
        assert min(c.estimate_us for c in answer(p)) > 100 * native.estimate_us


def test_gpu_estimates():
    layer = problem(arch="sm_90", batch=32, in_channels=256, out_channels=256, input_size=(14, 14),
                    layout="channels_last")
    (igemm,) = [c for c in answer(layer, CUDA) if c.kernel == "implicit_gemm"]  # Winograd too: test_winograd.py
    from conv_core.estimate import roofline_us

    assert igemm.estimate_us > max(roofline_us(layer))
    pointwise = layer.replace(filter_size=(1, 1), padding=((0, 0), (0, 0)))
    by_kernel = {c.kernel: c.estimate_us for c in answer(pointwise, CUDA)}
    assert by_kernel["gemm1x1"] < by_kernel["implicit_gemm"]
    first = layer.replace(layout="channels_first")
    assert answer(first, CUDA)[0].estimate_us > igemm.estimate_us
    thin = layer.replace(in_channels=3, out_channels=256)  # 3 of 16 reduction lanes used: slower per flop
    per_flop = lambda p: answer(p, CUDA)[0].estimate_us / p.flops  # noqa: E731
    assert per_flop(thin) > per_flop(layer)


def test_readme_kernel_table_is_the_registry():
    """The README's kernel table is generated: ``REGISTRY.markdown_table()`` between its markers."""
    assert readme_table(README.read_text()) == registry.REGISTRY.markdown_table()


def test_every_kernel_family_has_a_table_entry():
    for name in configs.table_names():
        assert set(registry.FAMILIES) == set(configs.table(name).families), name


def test_depthwise_problems_with_groups_take_only_the_depthwise_kernel():
    """The general families say why they leave a grouped depthwise problem; one input channel keeps both."""
    grouped = problem(in_channels=8, out_channels=16, groups=8)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        p = grouped.with_direction(direction)
        assert candidates.kernels_for(p) == (registry.DEPTHWISE_KERNELS[direction],)
        general = registry.REGISTRY.for_direction(direction)[0].name
        assert "only the depthwise kernel" in registry.REGISTRY.issues(p)[general]
        single = problem(in_channels=1, out_channels=4).with_direction(direction)
        assert candidates.kernels_for(single)[-1] == registry.DEPTHWISE_KERNELS[direction]
        assert len(candidates.kernels_for(single)) > 1
