"""A plan's kernel launches, decided from the problem alone and bound to tensors by role at run time.

A backend's plan is a sequence of :class:`Launch`\\ es: kernel, grid, scalar and constexpr arguments, warps and
stages, and for each pointer parameter the *role* of the tensor it takes (``a``, ``b``: the operands, ``bias``,
``out``: the result, ``workspace``: float32 scratch, or a backend's own roles such as views of the workspace).
A descriptor parameter (a TMA tensor map) names a role too, plus the data its descriptor is built from
(:attr:`Launch.descriptors`); the backend turns that data into a builder when it makes the launch site. Plans
hold no tensors, so the same plan drives the run, the ahead-of-time compile checks and the estimates.

Launching goes through :class:`~conv_core.launch_site.LaunchSite`: the JIT once per tensor specialization,
then the compiled kernel's launcher directly, Triton and Gluon kernels alike.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ..launch_site import LaunchSite
from ..problem import torch_dtype


@dataclass(frozen=True)
class Launch:
    """One kernel launch. ``pointers`` maps each tensor (or descriptor) parameter to a role; ``descriptors``
    maps a descriptor parameter to the data its descriptor is built from on the role's tensor."""

    kernel: object
    grid: tuple[int, ...]
    pointers: tuple[tuple[str, str], ...]
    scalars: tuple[tuple[str, int], ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    #: None: the compiler's default, no ``num_stages`` option passed (Gluon kernels pipeline by hand)
    num_stages: int | None = 1
    #: compile options beyond warps and stages (``maxnreg``)
    extra_options: tuple[tuple[str, object], ...] = ()
    descriptors: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        return self.kernel.__name__

    @property
    def options(self) -> dict[str, object]:
        """The launch's compile options, as the JIT takes them."""
        stages = {} if self.num_stages is None else {"num_stages": self.num_stages}
        return dict(num_warps=self.num_warps, **stages, **dict(self.extra_options))

    @property
    def values(self) -> dict[str, object]:
        """The scalar and constexpr arguments together."""
        return {**dict(self.scalars), **dict(self.constexprs)}

    def on_grid(self, grid: tuple[int, ...]) -> Launch:
        """The same launch on another grid (a persistent kernel's, sized per device)."""
        return dataclasses.replace(self, grid=tuple(grid))

    def make_site(self, bind: Callable[[str, object], Callable] | None = None, direct: Callable | None = None
                  ) -> LaunchSite:
        """The launch with everything but its tensors bound, called with the tensors by role; ``bind(parameter,
        data)`` returns the builder of a descriptor parameter's argument from its tensor; ``direct``: the
        site's (:class:`~conv_core.launch_site.LaunchSite`)."""
        builders = {name: bind(name, data) for name, data in self.descriptors} if self.descriptors else None
        return LaunchSite(self.kernel, self.grid, tuple(name for name, _ in self.pointers), self.values, self.options,
                          builders, roles=tuple(role for _, role in self.pointers), direct=direct)

    @functools.cached_property
    def site(self) -> LaunchSite:
        """:meth:`make_site` of a launch without descriptors, made once."""
        return self.make_site()


def make_launch(kernel, grid: Iterable[int], pointers: Mapping[str, str], scalars: Mapping[str, int],
                constexprs: Mapping[str, object], num_warps: int, num_stages: int | None = 1, **extra) -> Launch:
    """A :class:`Launch` from dicts, its arguments checked against the kernel's parameters here, on the host:
    Triton's interpreter ignores an unknown keyword that the compiled launch rejects. ``extra``: ``maxnreg``,
    and ``descriptors`` (a dict). A kernel may declare a launch option as a parameter (a Gluon kernel's
    ``num_warps``): the option fills it."""
    descriptors = extra.pop("descriptors", {})
    options = {"num_warps", *({"num_stages"} if num_stages is not None else ()), *extra}
    given = [*pointers, *scalars, *constexprs, *(name for name in kernel.arg_names if name in options)]
    if sorted(given) != sorted(kernel.arg_names):
        raise TypeError(f"{kernel.__name__}: arguments {sorted(set(given) ^ set(kernel.arg_names))} do not match "
                        "its parameters")
    if set(descriptors) - set(pointers):
        raise TypeError(f"{kernel.__name__}: descriptors {sorted(set(descriptors) - set(pointers))} have no role")
    return Launch(kernel, tuple(grid), tuple(pointers.items()), tuple(scalars.items()), tuple(constexprs.items()),
                  num_warps, num_stages, tuple(extra.items()), tuple(descriptors.items()))


def workspace_layout(*parts: tuple[str, int, str]) -> tuple[tuple[tuple[str, int, int, str], ...], int]:
    """Views of one float32 workspace, ``(role, first float32 word, float32 words, dtype)``, for ``parts``
    (``(role, float32 words, dtype)``) one after the other, and the float32 words they take together."""
    views, first = [], 0
    for role, words, dtype in parts:
        views.append((role, first, words, dtype))
        first += words
    return tuple(views), first


def workspace(elements: int, views: Sequence[tuple[str, int, int, str]],
              device: torch.device) -> dict[str, torch.Tensor]:
    """A fresh float32 workspace of ``elements`` (role ``workspace``) and its ``views`` by role (none without
    one). From torch's caching allocator: the same size every run, so capturable in a CUDA graph."""
    if not elements:
        return {}
    scratch = torch.empty(elements, dtype=torch.float32, device=device)
    return {"workspace": scratch, **{role: scratch[first:first + words].view(torch_dtype(dtype))
                                     for role, first, words, dtype in views}}


def launch_all(launches: Sequence[Launch], tensors: Mapping[str, torch.Tensor], device: torch.device) -> None:
    """Launch ``launches`` in order on ``device`` (made current if it is not), pointers bound by role."""
    if device.type == "cuda" and device.index is not None and device.index != torch._C._cuda_getDevice():
        with torch.cuda.device(device):
            launch_all(launches, tensors, device)
        return
    for launch in launches:
        launch.site(tensors)
