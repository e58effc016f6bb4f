"""A Triton launch whose grid, scalars and options are fixed, launched again without the JIT's per-call work.

Calling a ``@triton.jit`` kernel binds every argument, specializes it (alignment, divisibility, value 1),
builds the cache key, looks the compiled kernel up and checks the globals it used: tens of microseconds of
Python per launch on the H100's host (70-90 us measured, against 12 us for a whole ``F.conv2d``), so a
candidate of three launches spent about 250 us on the host for 30 us on the GPU. A backend's plan fixes
everything but the tensors, so the specialization can only change with the tensors' dtypes, 16-byte
alignment and device: :class:`LaunchSite` keys the compiled kernel on those, goes through the JIT once per
key (which compiles, or finds the kernel in its own cache) and then calls the compiled kernel's launcher
directly, with the current stream (so CUDA graph capture sees the same launch) and Triton's launch hooks
where anyone set one (:func:`launch_hooked`).

A parameter may take something built on a tensor rather than the tensor (a TMA descriptor, whose
specialization depends on the tensor's dtype alone once its box is fixed): ``arguments`` maps its name to the
function that builds it, called per launch on that launch's tensor, on either path. It must be cheap: it runs
on every call.

Nothing here imports Triton before a kernel is compiled: the kernel object is the backend's. Off CUDA (the
interpreter) and with ``CONV_CORE_JIT_LAUNCH=1`` every launch goes through the JIT; the first interpreted launch
drops the interpreter's dead work (:func:`conv_core.interpreter.lean_interpreter`).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping

import torch

from .interpreter import interpreting, lean_interpreter

#: Alignment (bytes) at which Triton's JIT specializes a pointer argument.
POINTER_ALIGNMENT = 16


def jit_only() -> bool:
    """Whether every launch goes through the JIT (``CONV_CORE_JIT_LAUNCH=1``: for debugging the launcher)."""
    return os.environ.get("CONV_CORE_JIT_LAUNCH") == "1"


def _launcher(compiled, grid: tuple[int, ...], site: LaunchSite) -> Callable[[list, list, int], None]:
    """``launch(bound, addresses, index)`` of a compiled kernel of ``site`` on ``grid``, with the bound tensors and
    their data pointers, on device ``index``'s current stream.

    The stream is read straight from torch (what Triton's launcher would ask for, minus asking which device is
    current: the caller made the tensors' device current); a Triton whose launcher takes no ``stream`` asks itself.
    While nobody hooks Triton's launches (:func:`launch_hooked`), the compiled kernel's ``run`` is called as
    Triton's own runner calls it, without the launch metadata that only hooks read (Triton 3.6 to 3.9 build it
    on every launch: a dictionary and two Python calls back from C into empty hook chains), and with each tensor's
    address where the tensor would go: Triton's launcher takes an integer as the pointer it is, where a tensor
    costs a ``data_ptr()`` call and a driver query (``cuPointerGetAttribute``) per pointer and launch. A site's
    ``direct`` may take the launch from there (a backend's launch of TMA descriptors). Hooks get Triton's own
    runner and the tensors, as they would without conv-core.
    """
    grid3 = (*grid, 1, 1)[:3]  # the launcher reads three grid sizes
    runner = compiled[grid3]
    if "stream" not in inspect.signature(runner).parameters:
        return lambda bound, addresses, index: runner(*site.fill(bound))
    run, function, metadata = (getattr(compiled, name, None) for name in ("run", "function", "packed_metadata"))
    runtime = None if run is None or function is None or metadata is None or lean_launch_off() else triton_runtime()
    if runtime is None:
        return lambda bound, addresses, index: runner(*site.fill(bound), stream=current_stream(index))
    gx, gy, gz = grid3
    direct = site.direct(run, grid3, function, metadata, site.descriptor_positions) if site.direct else None

    def launch(bound: list, addresses: list, index: int) -> None:
        if launch_hooked(runtime):
            runner(*site.fill(bound), stream=current_stream(index))
        elif direct is not None:
            direct(current_stream(index), site.fill(bound, addresses, direct.expansion))
        else:
            run(gx, gy, gz, current_stream(index), function, metadata, None, None, None, *site.fill(bound, addresses))
    return launch


def triton_runtime():
    """``triton.knobs.runtime`` (where Triton keeps its launch hooks), or None for a Triton without it."""
    try:
        import triton
    except ImportError:
        return None
    return getattr(getattr(triton, "knobs", None), "runtime", None)


def launch_hooked(runtime) -> bool:
    """Whether anyone hooks Triton's kernel launches (a profiler such as Proton): then launches take Triton's own
    runner, which builds what the hooks read and calls them. A hook is Triton's hook chain with hooks in it, or a
    function set in its place."""
    enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
    return ((enter is not None and getattr(enter, "calls", True) != [])
            or (exit_ is not None and getattr(exit_, "calls", True) != []))


def lean_launch_off() -> bool:
    """Whether launches take Triton's own runner always (``CONV_CORE_TRITON_RUNNER=1``: for debugging)."""
    return os.environ.get("CONV_CORE_TRITON_RUNNER") == "1"


def current_stream(index: int) -> int:
    """The handle of CUDA device ``index``'s current stream (what Triton's launcher asks torch for)."""
    return torch._C._cuda_getCurrentRawStream(index)


class LaunchSite:
    """Launches ``kernel[grid]`` with the tensors named ``pointers`` bound per call and ``values`` (the
    scalars and constexprs) and ``options`` (``num_warps``, ``num_stages``) fixed; the parameters named in
    ``arguments`` get what their function builds on their tensor (see the module's docstring).

    A call passes the tensors in a mapping keyed by ``roles`` (one per pointer, by default the pointer's own
    name): a backend's plan names its tensors by role (:mod:`conv_core.kit.launch`), and binding them to
    parameters here, once, saves building a second mapping on every launch.

    ``direct(run, grid, function, metadata, positions)``, where given, may return a launch under the compiled
    kernel's ``run`` (None: ``run`` it is), called ``(stream, arguments)`` with ``arguments`` from :meth:`fill`
    given its ``expansion`` (``positions``: the parameters that ``arguments`` builds): conv-gluon's launch of
    descriptors once per address, :mod:`conv_gluon.descriptor_launch`."""

    def __init__(self, kernel, grid: tuple[int, ...], pointers: tuple[str, ...], values: Mapping[str, object],
                 options: Mapping[str, object],
                 arguments: Mapping[str, Callable[[torch.Tensor], object]] | None = None,
                 roles: tuple[str, ...] | None = None, direct: Callable | None = None) -> None:
        self.kernel, self.grid, self.pointers = kernel, grid, pointers
        self.roles = pointers if roles is None else tuple(roles)
        if len(self.roles) != len(pointers):
            raise ValueError(f"{len(pointers)} pointers but {len(self.roles)} roles")
        self.values, self.options = dict(values), dict(options)
        self.arguments, self.direct = dict(arguments or {}), direct
        self._runners: dict[tuple, object] = {}

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Launch with ``tensors`` (one per role) on the current device and stream."""
        bound = [tensors[role] for role in self.roles]
        first = bound[0]
        if not first.is_cuda or jit_only():
            self._through_jit(self._converted(bound))
            return
        index = first.get_device()
        addresses = [t.data_ptr() for t in bound]
        key = (index, *[t.dtype for t in bound], *[address % POINTER_ALIGNMENT == 0 for address in addresses])
        runner = self._runners.get(key)
        if runner is None:
            compiled = self._through_jit(self._converted(bound))
            self._runners[key] = _launcher(compiled, self.grid, self)
            return
        runner(bound, addresses, index)

    def fill(self, bound: list, addresses: list | None = None, expansion: Callable | None = None) -> list:
        """The launcher's arguments, every kernel parameter in order: the fixed values, and in the tensor
        parameters' places each tensor (or its address, where ``addresses`` are given), or what ``arguments``
        builds on it (or, given ``expansion(which, address, build)``, the ``which``-th such parameter's expanded
        launcher arguments: :meth:`conv_gluon.descriptor_launch.DescriptorLaunch.expansion`)."""
        template, slots = self._arguments
        args = template.copy()
        for position, slot, build, which in slots:
            if build is None:
                args[position] = bound[slot] if addresses is None else addresses[slot]
            elif expansion is None:
                args[position] = build(bound[slot])
            else:
                args[position] = expansion(which, addresses[slot], functools.partial(build, bound[slot]))
        return args

    def warmup(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Compile for tensors like ``tensors`` (one per role) without launching (Triton's ``warmup``): a later
        launch finds the kernel in the JIT's cache (and in Triton's on-disk cache, for other processes)."""
        bound = [tensors[role] for role in self.roles]
        self.kernel.warmup(**self._converted(bound), **self.values, **self.options, grid=self.grid)

    def _converted(self, bound: list[torch.Tensor]) -> dict[str, object]:
        """The tensor parameters' arguments by name: each tensor, or what ``arguments`` builds on it."""
        return {name: self.arguments[name](t) if name in self.arguments else t for name, t in zip(self.pointers, bound)}

    def _through_jit(self, tensors: Mapping[str, object]):
        if interpreting():
            lean_interpreter()
        return self.kernel[self.grid](**tensors, **self.values, **self.options)

    @functools.cached_property
    def _arguments(self) -> tuple[list[object], tuple[tuple[int, int, Callable | None, int], ...]]:
        """The compiled kernel's launcher arguments, every kernel parameter in order (defaults filled in), with
        the tensors' places left to fill: ``(values, ((index, place in the bound tensors, builder or None, which
        built parameter or -1) of each tensor parameter))``."""
        parameters = list(inspect.signature(self.kernel.fn).parameters.items())
        template = [self.values.get(name, parameter.default) for name, parameter in parameters]
        built = [name for name, _ in parameters if name in self.pointers and name in self.arguments]
        slots = tuple((index, self.pointers.index(name), self.arguments.get(name),
                       built.index(name) if name in built else -1)
                      for index, (name, _) in enumerate(parameters) if name in self.pointers)
        return template, slots

    @property
    def descriptor_positions(self) -> tuple[int, ...]:
        """The kernel parameters (by index) that take what ``arguments`` builds, in order."""
        return tuple(position for position, _, build, _ in self._arguments[1] if build is not None)
