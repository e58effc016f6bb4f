"""What the cdna backend offers, and where it declines: CDNA devices get the chip's tables, options and estimates;
any other GPU a decline naming the architectures served, unless ``CONV_CDNA_ARCH`` asks for a CDNA table there."""

from __future__ import annotations

import pytest
import torch
from conv_core.problem import ConvProblem
from conv_core.testing.plugin_checks import the_decline
from conv_cdna import candidates, configs
from conv_cdna.chips import chip
from conv_rdna.api import REGISTRY

CUDA = torch.device("cuda")


def layer(arch: str, **changes) -> ConvProblem:
    fields = dict(direction="fwd", batch=8, in_channels=64, out_channels=128, input_size=(28, 28), filter_size=(3, 3),
                  stride=(1, 1), padding=1, dilation=(1, 1), groups=1, dtype="bfloat16", layout="channels_last",
                  arch=arch)
    return ConvProblem(**{**fields, **changes})


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    """These tests look at GPU candidates: no interpreter, no emulation unless a test asks."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("CONV_CDNA_ARCH", raising=False)


@pytest.mark.parametrize("arch", configs.TARGETS)
def test_a_cdna_gpu_gets_its_table_options_and_estimates(arch):
    found = candidates.candidates(layer(arch), CUDA)
    assert found and all(c.backend == "cdna" for c in found)
    options = {k: v for k, v in chip(arch).amd_options.items() if v}
    for c in found:
        assert "experimental" in c.tags and c.estimate_us > 0
        launches = c.run.plan.launches
        assert all(dict(x.extra_options) == options for x in launches), c.kernel_id
    assert {c.kernel for c in found} == {e.name for e in REGISTRY.applicable(layer(arch))}


@pytest.mark.parametrize("arch, served_by", [("sm_90", None), ("gfx1100", "conv-rdna")])
def test_other_gpus_are_declined_with_a_reason(arch, served_by):
    reason = the_decline(candidates.candidates(layer(arch), CUDA))
    assert "gfx90a, gfx942, gfx950" in reason and arch in reason
    assert served_by is None or served_by in reason


def test_emulating_a_cdna_table_keeps_the_threads_and_drops_the_amd_options(monkeypatch):
    monkeypatch.setenv("CONV_CDNA_ARCH", "gfx950")
    on_h100 = {c.kernel_id: c.run.plan for c in candidates.candidates(layer("sm_90"), CUDA)}
    native = {c.kernel_id: c.run.plan for c in candidates.candidates(layer("gfx950"), CUDA)}
    assert on_h100.keys() == native.keys()
    for kernel_id, plan in on_h100.items():
        for emulated, real in zip(plan.launches, native[kernel_id].launches):
            assert emulated.num_warps == 2 * real.num_warps and emulated.extra_options == ()


def test_an_unknown_emulated_architecture_is_an_error(monkeypatch):
    monkeypatch.setenv("CONV_CDNA_ARCH", "gfx1100")
    with pytest.raises(ValueError, match="CONV_CDNA_ARCH"):
        candidates.candidates(layer("sm_90"), CUDA)


@pytest.mark.parametrize("changes, words", [
    (dict(dtype="float32"), "input dtype float32"),
    (dict(input_size=(8, 8, 8), filter_size=(3, 3, 3), stride=(1, 1, 1), dilation=(1, 1, 1)), "3D"),
])
def test_what_the_kernels_do_not_take_is_declined(changes, words):
    assert words in the_decline(candidates.candidates(layer("gfx942", **changes), CUDA))


def test_the_same_problem_gets_the_same_candidates():
    first = [(c.kernel_id, c.estimate_us) for c in candidates.candidates(layer("gfx942"), CUDA)]
    assert first == [(c.kernel_id, c.estimate_us) for c in candidates.candidates(layer("gfx942"), CUDA)]


def test_estimates_grow_with_the_work():
    small = {c.kernel: c.estimate_us for c in candidates.candidates(layer("gfx942"), CUDA)}
    large = {c.kernel: c.estimate_us for c in candidates.candidates(layer("gfx942", batch=64), CUDA)}
    assert all(large[k] > small[k] for k in small)


def test_every_kernel_of_the_registry_is_offered_somewhere():
    """conv-cdna runs all of conv-rdna's families: each kernel is a candidate for some problem of the suites."""
    from conv_cdna.derive import layers

    offered = {c.kernel for p in layers("gfx942")[::3] for c in candidates.candidates(p, CUDA) if hasattr(c, "kernel")}
    for extra in (dict(groups=64, out_channels=64), dict(out_channels=3, direction="bwd_weight")):
        offered |= {c.kernel for c in candidates.candidates(layer("gfx942", **extra), CUDA)}
    assert offered == set(REGISTRY.names)
