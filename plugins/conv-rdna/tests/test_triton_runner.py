"""What conv-core's launch site assumes of the installed Triton (:func:`conv_core.launch_site._launcher`): where
nobody hooks launches, it calls a compiled kernel's ``run`` as Triton's own runner does, so that runner's argument
order, and where the hooks live, are checked here against each Triton the tests install (3.6 and 3.9), on the CPU:
a compiled kernel's runner is driven with a stand-in ``run``."""

from __future__ import annotations

import pytest
from triton.compiler.compiler import CompiledKernel

from conv_core.launch_site import launch_hooked, triton_runtime


def test_tritons_runner_calls_run_with_the_grid_stream_handle_metadata_hooks_then_the_arguments():
    runs = []
    compiled = object.__new__(CompiledKernel)  # no module to load: the runner's own code is what is checked
    compiled._init_handles = lambda: None
    compiled.function, compiled.packed_metadata = "function handle", ("metadata",)
    compiled.name, compiled.src = "kernel", None  # what the launch metadata reads
    compiled._run = lambda *args: runs.append(args)
    runtime = triton_runtime()
    try:
        compiled.run  # noqa: B018 - Triton's property or attribute, as the launch site reads it
    except AttributeError:
        pytest.fail("a compiled kernel has no run")
    compiled[(4, 2, 1)]("x", "out", 100, stream=7000)
    (args,) = runs
    assert args[:6] == (4, 2, 1, 7000, "function handle", ("metadata",))
    assert args[7:9] == (runtime.launch_enter_hook, runtime.launch_exit_hook)
    assert args[9:] == ("x", "out", 100)


def test_triton_keeps_empty_launch_hook_chains_by_default():
    import triton

    assert triton_runtime() is triton.knobs.runtime
    assert launch_hooked(triton_runtime()) is False
