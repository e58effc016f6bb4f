"""conv-cdna's tables: ``data/configs.json``, in conv-rdna's format (:func:`conv_rdna.configs.build_table`), one
entry per CDNA architecture, written by :mod:`conv_cdna.derive` from the chip model and never measured.

Which table a device gets (:func:`table_for`): its own on gfx90a, gfx942 and gfx950; under Triton's CPU interpreter,
and on a GPU of another kind only when ``CONV_CDNA_ARCH`` names one (for testing the CDNA tile shapes: the
conformance kit on CPU, the float64 checks on an H100), that architecture's (gfx942 by default for the interpreter).
"""

from __future__ import annotations

import functools
import os

from conv_rdna.api import ArchTable, build_table

from .chips import DATA

#: Architectures the tables are derived for.
TARGETS = ("gfx90a", "gfx942", "gfx950")
#: The table the interpreter runs when ``CONV_CDNA_ARCH`` is unset.
INTERPRETER_DEFAULT = "gfx942"
#: Input dtypes the kernels take: 16-bit MFMA operands (float32 is left to MIOpen's xf32/fp32 kernels).
DTYPES = ("float16", "bfloat16")


def emulated_arch() -> str | None:
    """``CONV_CDNA_ARCH``: the CDNA architecture whose tables run on a device that is not one (tests only)."""
    name = os.environ.get("CONV_CDNA_ARCH") or None
    if name is not None and name not in TARGETS:
        raise ValueError(f"CONV_CDNA_ARCH={name!r} is not one of {', '.join(TARGETS)}")
    return name


def table_arch(device_arch: str, interpreted: bool) -> str | None:
    """The architecture whose table runs on a device of ``device_arch``, or None (conv-cdna declines)."""
    if device_arch in TARGETS:
        return device_arch
    if interpreted:
        return emulated_arch() or INTERPRETER_DEFAULT
    return emulated_arch()


@functools.cache
def table(name: str) -> ArchTable:
    """The table of architecture ``name`` (one of :data:`TARGETS`), checked."""
    return build_table(DATA.json()["archs"], name, DATA.swept(name), "conv_cdna/data/configs.json")
