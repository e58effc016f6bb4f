"""The ``conv-core`` command line's option values and its usage error, shared by every subcommand's module."""

from __future__ import annotations

import argparse

import torch

from .problem import dtype_name


class UsageError(Exception):
    """A mistake in the command line; reported in one line with exit status 2."""


# ---- option values ------------------------------------------------------------------------------------

_DTYPE_ALIASES = {"fp16": "float16", "fp32": "float32", "fp64": "float64", "bf16": "bfloat16"}
_LAYOUT_ALIASES = {
    "channels_last": ("nhwc", "ndhwc", "nwc", "cl", "channels_last"),
    "channels_first": ("nchw", "ncdhw", "ncw", "cf", "channels_first"),
}


def parse_dtype(text: str) -> str:
    """``bf16``/``fp16``/``fp32`` (or any name :func:`conv_core.problem.dtype_name` knows) -> canonical name."""
    try:
        return dtype_name(_DTYPE_ALIASES.get(text.lower(), text.lower()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_layout(text: str) -> str:
    """``nhwc``/``channels_last`` -> ``channels_last``; ``nchw``/``channels_first`` -> ``channels_first``."""
    for layout, names in _LAYOUT_ALIASES.items():
        if text.lower() in names:
            return layout
    raise argparse.ArgumentTypeError(f"layout {text!r} is not one of nhwc, nchw, channels_last, channels_first")


def parse_device(text: str | None) -> torch.device:
    """The device to use: ``text``, or the GPU if there is one, else the CPU."""
    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise UsageError(f"bad device {text!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no GPU is available to PyTorch on this machine")
    return device
