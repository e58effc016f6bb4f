"""conv_core.launch_site: when a launch goes through the JIT and when straight to the compiled kernel, and
what the compiled kernel's launcher receives (checked with stand-ins for a JIT kernel and for CUDA tensors,
since CI has no GPU; the GPU run launches every conv-rdna kernel through it)."""

from __future__ import annotations

import pytest
import torch

from conv_core.launch_site import LaunchSite


class _Tensor:
    """What a launch reads of a tensor: device, dtype, address."""

    def __init__(self, address: int, dtype=torch.bfloat16, device: str = "cuda:0") -> None:
        self.device, self.dtype, self.address = torch.device(device), dtype, address

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def get_device(self) -> int:
        return self.device.index if self.is_cuda else -1

    def data_ptr(self) -> int:
        return self.address


def _kernel_body(x_ptr, out_ptr, n, scale, BLOCK, EVEN=True):  # noqa: N803
    """The stand-in kernel's signature (a default constexpr included)."""


class _Kernel:
    """A JIT kernel: ``kernel[grid](**kwargs)`` compiles (counted) and returns the compiled kernel, whose
    ``[grid]`` is the launcher taking every parameter in order."""

    def __init__(self) -> None:
        self.fn = _kernel_body
        self.jit_calls: list[dict] = []
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        def jit(**kwargs):
            self.jit_calls.append(kwargs)
            return _Compiled(self)
        return jit

    def warmup(self, **kwargs):
        self.jit_calls.append(kwargs)


class _Compiled:
    def __init__(self, kernel: _Kernel) -> None:
        self.kernel = kernel

    def __getitem__(self, grid):
        gx, gy, gz = grid  # Triton's launcher reads three sizes
        return lambda *args: self.kernel.launches.append((grid, args))


def _site(kernel: _Kernel) -> LaunchSite:
    return LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64),
                      dict(num_warps=4, num_stages=2))


def test_the_first_launch_goes_through_the_jit_and_later_ones_straight_to_the_compiled_kernel():
    kernel, x, out = _Kernel(), _Tensor(1024), _Tensor(2048)
    site = _site(kernel)
    site({"x_ptr": x, "out_ptr": out})
    assert kernel.jit_calls == [dict(x_ptr=x, out_ptr=out, n=100, scale=3, BLOCK=64, num_warps=4, num_stages=2)]
    assert kernel.launches == []

    x2, out2 = _Tensor(4096), _Tensor(8192)
    site({"x_ptr": x2, "out_ptr": out2})
    assert len(kernel.jit_calls) == 1
    assert kernel.launches == [((4, 2, 1), (x2, out2, 100, 3, 64, True))]  # every parameter in order, defaults too


class _StreamCompiled(_Compiled):
    """A compiled kernel whose launcher takes the stream, as Triton's does."""

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.kernel.launches.append((grid, args, stream))


class _StreamKernel(_Kernel):
    def __getitem__(self, grid):
        def jit(**kwargs):
            self.jit_calls.append(kwargs)
            return _StreamCompiled(self)
        return jit


def test_a_launcher_that_takes_a_stream_gets_the_devices_current_one(monkeypatch):
    """Triton's launcher asks which device is current and that device's stream; the site, whose caller made the
    tensors' device current, hands it that device's stream itself."""
    import conv_core.launch_site as launch_site

    asked = []
    monkeypatch.setattr(launch_site, "current_stream", lambda index: asked.append(index) or 7000 + index)
    kernel = _StreamKernel()
    site = _site(kernel)
    for _ in range(2):
        site({"x_ptr": _Tensor(1024, device="cuda:1"), "out_ptr": _Tensor(2048, device="cuda:1")})
    assert len(kernel.jit_calls) == 1 and asked == [1]
    (grid, args, stream), = kernel.launches
    assert grid == (4, 2, 1) and args[2:] == (100, 3, 64, True) and stream == 7001


@pytest.mark.parametrize("change", ["alignment", "dtype", "device"])
def test_a_tensor_the_compiled_kernel_was_not_specialized_for_goes_through_the_jit(change):
    kernel = _Kernel()
    site = _site(kernel)
    site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    other = {"alignment": _Tensor(1026), "dtype": _Tensor(1024, torch.float16),
             "device": _Tensor(1024, device="cuda:1")}[change]
    site({"x_ptr": other, "out_ptr": _Tensor(2048)})
    assert len(kernel.jit_calls) == 2 and kernel.launches == []


def test_cpu_tensors_and_the_debug_switch_always_go_through_the_jit(monkeypatch):
    kernel = _Kernel()
    site = _site(kernel)
    for _ in range(2):
        site({"x_ptr": _Tensor(1024, device="cpu"), "out_ptr": _Tensor(2048, device="cpu")})
    monkeypatch.setenv("CONV_CORE_JIT_LAUNCH", "1")
    for _ in range(2):
        site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    assert len(kernel.jit_calls) == 4 and kernel.launches == []


def test_arguments_are_built_on_each_launchs_tensor_on_both_paths():
    """A descriptor parameter gets what its function builds on the call's tensor, through the JIT and straight to
    the compiled kernel alike; the cache key still follows the tensor (its dtype and alignment)."""
    kernel, built = _Kernel(), []

    def describe(t: _Tensor) -> tuple:
        built.append(t)
        return ("descriptor of", t.address)

    site = LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64), dict(num_warps=4),
                      arguments={"x_ptr": describe})
    x, out = _Tensor(1024), _Tensor(2048)
    site({"x_ptr": x, "out_ptr": out})
    assert kernel.jit_calls[0]["x_ptr"] == ("descriptor of", 1024) and kernel.jit_calls[0]["out_ptr"] is out
    x2 = _Tensor(4096)
    site({"x_ptr": x2, "out_ptr": out})
    assert len(kernel.jit_calls) == 1
    assert kernel.launches == [((4, 2, 1), (("descriptor of", 4096), out, 100, 3, 64, True))]
    site({"x_ptr": _Tensor(4096, torch.float16), "out_ptr": out})  # another dtype: another specialization
    assert len(kernel.jit_calls) == 2 and built == [x, x2, built[2]] and built[2].dtype == torch.float16


def test_warmup_compiles_through_the_jit_without_launching():
    kernel = _Kernel()
    site = LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64), dict(num_warps=4),
                      arguments={"x_ptr": lambda t: ("descriptor of", t.address)})
    out = _Tensor(2048)
    site.warmup({"x_ptr": _Tensor(1024), "out_ptr": out})
    assert kernel.jit_calls == [dict(x_ptr=("descriptor of", 1024), out_ptr=out, n=100, scale=3, BLOCK=64,
                                     num_warps=4, grid=(4, 2))]
    assert kernel.launches == []


def test_a_site_takes_its_tensors_by_role():
    """A plan names its tensors by role; the site binds each role to its parameter (two may share one) once."""
    kernel = _Kernel()
    site = LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64), dict(num_warps=4),
                      roles=("a", "a"))
    x = _Tensor(1024)
    for _ in range(2):
        site({"a": x, "b": _Tensor(4096)})
    assert kernel.jit_calls[0]["x_ptr"] is x and kernel.jit_calls[0]["out_ptr"] is x
    assert kernel.launches == [((4, 2, 1), (x, x, 100, 3, 64, True))]
    with pytest.raises(ValueError, match="2 pointers but 1 roles"):
        LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), {}, {}, roles=("a",))


# ---- the compiled kernel's run, without Triton's runner, while nobody hooks launches ---------------------


class _HookChain:
    """Triton's launch hook chain (``triton.knobs.runtime.launch_enter_hook``): hooks in ``calls``."""

    def __init__(self) -> None:
        self.calls: list = []


class _Runtime:
    def __init__(self) -> None:
        self.launch_enter_hook, self.launch_exit_hook = _HookChain(), _HookChain()


class _RunCompiled(_StreamCompiled):
    """A compiled kernel as Triton 3.6-3.9 make it: a runner per grid, and the ``run`` it calls (the backend's
    launcher) with the kernel's handle and packed metadata."""

    function, packed_metadata = "function handle", ("metadata",)

    def run(self, *args):
        self.kernel.runs.append(args)


class _RunKernel(_StreamKernel):
    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple] = []

    def __getitem__(self, grid):
        def jit(**kwargs):
            self.jit_calls.append(kwargs)
            return _RunCompiled(self)
        return jit


@pytest.fixture
def runtime(monkeypatch) -> _Runtime:
    import conv_core.launch_site as launch_site

    found = _Runtime()
    monkeypatch.setattr(launch_site, "triton_runtime", lambda: found)
    monkeypatch.setattr(launch_site, "current_stream", lambda index: 7000 + index)
    return found


def test_without_launch_hooks_a_launch_calls_the_compiled_kernels_run_as_tritons_runner_would(runtime):
    """Triton's runner builds launch metadata for the hooks on every launch and hands the hook chains to the
    launcher, which calls them; with none in them the site calls ``run`` with None for all three, and each
    tensor's address in its place (the launcher takes an integer as the pointer, with no driver query)."""
    kernel = _RunKernel()
    site = _site(kernel)
    x, out = _Tensor(1024), _Tensor(2048)
    for _ in range(2):
        site({"x_ptr": x, "out_ptr": out})
    assert kernel.launches == []
    assert kernel.runs == [(4, 2, 1, 7000, "function handle", ("metadata",), None, None, None,
                            1024, 2048, 100, 3, 64, True)]


@pytest.mark.parametrize("hook", ["in_the_chain", "set_in_its_place"])
def test_a_launch_hook_sends_launches_through_tritons_runner(runtime, hook):
    """A profiler's hook (added to the chain, or a function set in its place), even one added after the site
    was made, gets every launch: the site then calls Triton's runner, with the tensors."""
    kernel = _RunKernel()
    site = _site(kernel)
    site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    if hook == "in_the_chain":
        runtime.launch_exit_hook.calls.append(print)
    else:
        runtime.launch_enter_hook = print
    x, out = _Tensor(1024), _Tensor(2048)
    site({"x_ptr": x, "out_ptr": out})
    assert kernel.runs == [] and kernel.launches == [((4, 2, 1), (x, out, 100, 3, 64, True), 7000)]
    runtime.launch_enter_hook, runtime.launch_exit_hook = None, _HookChain()  # none again
    site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    assert len(kernel.runs) == 1


def test_the_debug_switch_keeps_tritons_runner(runtime, monkeypatch):
    monkeypatch.setenv("CONV_CORE_TRITON_RUNNER", "1")
    kernel = _RunKernel()
    site = _site(kernel)
    for _ in range(2):
        site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    assert kernel.runs == [] and len(kernel.launches) == 1



# ---- a backend's own launch under the compiled kernel's run (conv-gluon's descriptors) -------------------


class _Direct:
    """A site's ``direct`` launch: records what it is made with, the expansions asked and the launches."""

    def __init__(self, made: list) -> None:
        self.made, self.launches, self.asked = made, [], []

    def __call__(self, stream, args):
        self.launches.append((stream, args))

    def expansion(self, which, address, build):
        self.asked.append((which, address))
        return ["expanded", which, build()]


def test_a_sites_direct_launch_gets_the_expansions_of_what_arguments_build_and_hooks_still_take_tritons_runner(
        runtime):
    kernel, made = _RunKernel(), []

    def direct(run, grid, function, metadata, positions):
        made.append((grid, function, metadata, positions))
        made.append(_Direct(made))
        return made[-1]

    site = LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64), dict(num_warps=4),
                      arguments={"x_ptr": lambda t: ("descriptor of", t.address)}, direct=direct)
    x, out = _Tensor(1024), _Tensor(2048)
    for _ in range(2):
        site({"x_ptr": x, "out_ptr": out})
    made_with, launch = made
    assert made_with == ((4, 2, 1), "function handle", ("metadata",), (0,))
    assert launch.asked == [(0, 1024)]
    assert launch.launches == [(7000, [["expanded", 0, ("descriptor of", 1024)], 2048, 100, 3, 64, True])]
    assert kernel.runs == []
    runtime.launch_exit_hook.calls.append(print)
    site({"x_ptr": x, "out_ptr": out})
    assert kernel.launches == [((4, 2, 1), (("descriptor of", 1024), out, 100, 3, 64, True), 7000)]


def test_a_direct_launch_that_declines_leaves_the_launch_to_run(runtime):
    kernel = _RunKernel()
    site = LaunchSite(kernel, (4, 2), ("x_ptr", "out_ptr"), dict(n=100, scale=3, BLOCK=64), dict(num_warps=4),
                      arguments={"x_ptr": lambda t: ("descriptor of", t.address)}, direct=lambda *args: None)
    for _ in range(2):
        site({"x_ptr": _Tensor(1024), "out_ptr": _Tensor(2048)})
    assert kernel.runs == [(4, 2, 1, 7000, "function handle", ("metadata",), None, None, None,
                            ("descriptor of", 1024), 2048, 100, 3, 64, True)]
