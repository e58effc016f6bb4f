"""conv_gluon.descriptor_launch against the installed Triton's own launcher code: its descriptor wrapper and
``CudaLauncher.__call__`` are driven on the CPU with a stand-in launcher and a stand-in descriptor expansion
(encoding a tensor map needs a GPU; the GPU run checks the bits of every conv-gluon kernel launched this way
against the JIT's, ``tests/gpu_host_path.py``)."""

from __future__ import annotations

import types

import pytest
import triton
from triton.backends.nvidia import driver

from conv_gluon import descriptor_launch

SIGNATURE = {0: "*bf16", 1: "tensordesc<bf16[64, 32]>", 2: "i32", 3: "tensordesc<bf16[64, 32]>", 4: "constexpr"}


@pytest.fixture
def encoded(monkeypatch) -> list:
    """Triton's descriptor expansion, replaced: a tensor map naming the address and swizzle; each call kept."""
    calls = []

    def expand(descriptor, metadata, *_):
        calls.append(descriptor.address)
        return [("map", descriptor.address, metadata["swizzle"]), 64, 32, 32, 1]
    monkeypatch.setattr(driver, "make_tensordesc_arg", expand)
    return calls


def _run(launched: list, metadata=({"swizzle": 128}, {"swizzle": 64}), **fields) -> types.SimpleNamespace:
    """A ``CudaLauncher`` of a kernel with two descriptors, its launcher recording into ``launched``."""
    wrapper = driver.wrap_handle_tensordesc(lambda *args: launched.append(args), SIGNATURE, list(metadata))
    values = dict(launch=wrapper, global_scratch_size=0, profile_scratch_size=0, global_scratch_align=1,
                  profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=True, num_ctas=1)
    return types.SimpleNamespace(**{**values, **fields})


def _described(address: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(address=address)


def test_the_launcher_gets_what_tritons_own_wrapper_passes_it(encoded):
    launched = []
    run = _run(launched)
    launch = descriptor_launch.direct(run, (4, 1, 1), "function", ("packed",), (1, 3))
    assert launch is not None, f"Triton {triton.__version__}'s launcher is not the one the launch unwraps"
    driver.CudaLauncher.__call__(run, 4, 1, 1, 7000, "function", ("packed",), None, None, None,
                                 1024, _described(4096), 12, _described(8192), 64)
    launch(7000, [1024, launch.expansion(0, 4096, lambda: _described(4096)), 12,
                  launch.expansion(1, 8192, lambda: _described(8192)), 64])
    assert len(launched) == 2 and launched[0] == launched[1]


def test_a_descriptor_is_expanded_once_per_address(encoded):
    launch = descriptor_launch.direct(_run([]), (4, 1, 1), "function", ("packed",), (1, 3))
    for address in (4096, 4096, 8192, 4096):
        launch.expansion(0, address, lambda address=address: _described(address))
    assert encoded == [4096, 8192]
    for address in range(descriptor_launch.KEPT_ADDRESSES + 1):  # many new addresses: the kept ones are dropped
        launch.expansion(1, 16 * address, lambda address=address: _described(16 * address))
    assert len(launch._expanded[1]) <= descriptor_launch.KEPT_ADDRESSES


@pytest.mark.parametrize("shape", ["scratch", "profile_scratch", "not_lowered", "no_wrapper"])
def test_a_launcher_shaped_otherwise_is_left_to_tritons_run(encoded, shape):
    """Scratch memory to allocate per launch, a descriptor not lowered to a tensor map, a launcher without
    Triton's wrapper: ``run`` builds the arguments itself, as without conv-gluon."""
    fields = {"scratch": dict(global_scratch_size=64), "profile_scratch": dict(profile_scratch_size=64),
              "not_lowered": {}, "no_wrapper": dict(launch=print)}[shape]
    metadata = (None, None) if shape == "not_lowered" else ({"swizzle": 128}, {"swizzle": 64})
    assert descriptor_launch.direct(_run([], metadata, **fields), (4, 1, 1), "function", ("packed",), (1, 3)) is None
