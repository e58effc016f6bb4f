"""Device architectures: naming a device's architecture and reading its limits.

Every hardware fact the project uses (shared-memory limit, warp size, matrix
instruction, the rates behind roofline estimates) lives in
``data/architectures.json``; this module is the only reader of that file, so a
plugin that needs a limit asks :func:`spec` instead of keeping its own constant.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import torch


@dataclass(frozen=True)
class ArchSpec:
    """Facts about one architecture, as recorded in ``architectures.json``."""

    name: str
    vendor: str
    family: str
    warp_size: int
    shared_memory_bytes: int
    matrix_instruction: str | None
    matmul_tflops: float
    copy_tbps: float
    launch_us: float
    measured: bool


@functools.cache
def _table() -> dict[str, ArchSpec]:
    text = resources.files("conv_core").joinpath("data/architectures.json").read_text()
    raw = json.loads(text)["architectures"]
    return {name: ArchSpec(name=name, **fields) for name, fields in raw.items()}


def known_architectures() -> tuple[str, ...]:
    """Names of every architecture the project has facts for."""
    return tuple(_table())


def spec(arch: str) -> ArchSpec:
    """The facts for ``arch``; an architecture not in the table gets a stand-in, never an error.

    An unknown NVIDIA ``sm_XY`` gets the newest known ``sm_`` entry not newer
    than it; anything else (``sm_75``, ``mps``, ``meta``, an unlisted ``gfx``)
    gets the conservative ``generic`` entry, so estimates stay plausible and the
    ``aten`` backend still runs everywhere PyTorch does.
    """
    table = _table()
    if arch in table:
        return table[arch]
    if arch.startswith("sm_") and arch[3:].rstrip("a").isdigit():
        number = int(arch[3:].rstrip("a"))
        older = [n for n in table if n.startswith("sm_") and int(n[3:]) <= number]
        if older:
            return table[max(older, key=lambda n: int(n[3:]))]
    return table["generic"]


@functools.cache
def _cuda_arch(index: int) -> str:
    props = torch.cuda.get_device_properties(index)
    gcn = getattr(props, "gcnArchName", "")
    if torch.version.hip and gcn:
        return gcn.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def device_arch(device: torch.device | str) -> str:
    """The architecture name of ``device``: ``sm_90``, ``gfx942``, ``gfx1201`` or ``cpu``."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _cuda_arch(index)
    if device.type == "cpu":
        return "cpu"
    return device.type


def device_name(device: torch.device | str) -> str:
    """A human-readable device name, used to key measured timings."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_name(index)
    return device.type
