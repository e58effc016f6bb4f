"""A launch with TMA descriptors that encodes each descriptor once per address, for Triton 3.6's CUDA launcher.

Triton 3.6 wraps the launcher of a kernel that takes host-side tensor descriptors in a Python function that, on
every launch, walks every argument and expands each descriptor into the 128-byte ``CUtensorMap`` the kernel
reads (``make_tensordesc_arg``: a driver call to encode it) followed by its shape and strides. A launch site's
descriptors keep their shape, strides and box for good (a :class:`~conv_gluon.descriptors.Binding`), so the
expansion changes only with the tensor's address: here it is made once per address (Triton's own
``make_tensordesc_arg``, on the site's descriptor) and kept, and the launcher under the wrapper is called with
the expanded arguments. Torch's caching allocator hands the same addresses back step after step, so a model's
steady state encodes nothing.

Only a launcher shaped as 3.6's is taken this way (:func:`unwrap`): one whose wrapper holds the launcher and the
descriptors' metadata, every descriptor lowered to a ``CUtensorMap``, and no scratch memory to allocate per
launch. Any other goes through Triton's wrapper as before. :func:`direct` is what a conv-gluon launch site
(:class:`conv_core.launch_site.LaunchSite`) asks, once per compiled kernel, while nobody hooks launches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

#: Arguments Triton 3.6's launcher takes before the kernel's: grid (3), stream, function, cooperative grid,
#: programmatic dependent launch, global and profile scratch, packed metadata, launch metadata, two hooks.
BASE_ARGUMENTS = 13

#: Addresses kept per descriptor parameter before all are dropped (a model reuses a few per layer).
KEPT_ADDRESSES = 16


class Unwrapped(NamedTuple):
    """What a launch needs to skip Triton's wrapper: the launcher under it, the expansion of one descriptor
    (``expand(descriptor, metadata)``: Triton's own) and each descriptor parameter's metadata, in order."""

    launcher: Callable
    expand: Callable
    metadata: tuple


def _closure(function) -> dict:
    """A Python function's free variables by name (none for anything else)."""
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None)
    if code is None or not cells:
        return {}
    return dict(zip(code.co_freevars, (cell.cell_contents for cell in cells)))


def unwrap(run) -> Unwrapped | None:
    """The launcher under Triton 3.6's descriptor wrapper of compiled kernel's ``run`` (a ``CudaLauncher``), or
    None where ``run`` is not shaped that way, a descriptor was not lowered to a ``CUtensorMap`` or a launch
    needs scratch memory."""
    wrapper = getattr(run, "launch", None)
    found = _closure(wrapper) if callable(wrapper) else {}
    launcher, metadata = found.get("launcher"), found.get("tensordesc_meta")
    expand = getattr(wrapper, "__globals__", {}).get("make_tensordesc_arg")
    shaped = (launcher is not None and expand is not None and metadata
              and getattr(wrapper, "__globals__", {}).get("_BASE_ARGS_FORMAT_LEN") == BASE_ARGUMENTS)
    if not shaped or any(meta is None for meta in metadata):
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    return Unwrapped(launcher, expand, tuple(metadata))


class DescriptorLaunch:
    """``launch(stream, args)``: kernel arguments ``args`` (descriptors in their parameters' places, as Triton's
    runner takes them) launched through the unwrapped launcher, each descriptor expanded once per address."""

    def __init__(self, run, unwrapped: Unwrapped, grid: tuple[int, int, int], function, packed_metadata,
                 descriptor_positions: Sequence[int]) -> None:
        self.unwrapped, self.positions = unwrapped, tuple(descriptor_positions)
        if len(self.positions) != len(unwrapped.metadata):
            raise ValueError(f"{len(self.positions)} descriptor parameters, {len(unwrapped.metadata)} lowered")
        self.head = (*grid, None, function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     packed_metadata, None, None, None)
        self._expanded: list[dict[int, list]] = [{} for _ in self.positions]

    def expansion(self, which: int, address: int, build: Callable[[], object]) -> list:
        """Descriptor parameter ``which``'s launcher arguments for a tensor at ``address`` (``build()`` makes its
        descriptor: called only for an address not seen lately)."""
        kept = self._expanded[which]
        found = kept.get(address)
        if found is None:
            if len(kept) >= KEPT_ADDRESSES:
                kept.clear()
            found = kept[address] = list(self.unwrapped.expand(build(), self.unwrapped.metadata[which]))
        return found

    def __call__(self, stream: int, args: list) -> None:
        head = list(self.head)
        head[3] = stream
        flat = head
        start = 0
        for position in self.positions:
            flat += args[start:position]
            flat += args[position]  # the descriptor's expansion, spliced in
            start = position + 1
        flat += args[start:]
        self.unwrapped.launcher(*flat)


def direct(run, grid: tuple[int, int, int], function, packed_metadata,
           positions: Sequence[int]) -> DescriptorLaunch | None:
    """The launch of a compiled kernel's ``run`` with its descriptors (kernel parameters ``positions``) expanded
    once per address, or None where ``run`` is not shaped as Triton 3.6's (:func:`unwrap`)."""
    unwrapped = unwrap(run) if positions else None
    return None if unwrapped is None else DescriptorLaunch(run, unwrapped, grid, function, packed_metadata, positions)
