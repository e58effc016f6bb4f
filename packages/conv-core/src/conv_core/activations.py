"""The fused activations the core knows, and their PyTorch definitions.

A backend that fuses an activation into its epilogue must compute the function
defined here; the reference and the aten backend apply exactly these.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .errors import ConvArgumentError

#: Activation name -> the function it denotes (applied in the output's precision or better).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "relu6": F.relu6,
    "gelu": lambda t: F.gelu(t, approximate="none"),
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
}

#: Activations whose derivative can be read off the activation's output alone.
#: For the others the backward pass needs the pre-activation value, so a
#: differentiable call computes the convolution unfused and applies the
#: activation through PyTorch's autograd.
DERIVATIVE_FROM_OUTPUT = frozenset({"relu", "relu6"})


def check_activation(name: str | None) -> str | None:
    """Return ``name`` if it is a known activation (or None); raise a clear error otherwise."""
    if name is None or name in ACTIVATIONS:
        return name
    raise ConvArgumentError(f"activation={name!r} is not supported; choose one of {sorted(ACTIVATIONS)} or None")


def apply(name: str | None, t: torch.Tensor) -> torch.Tensor:
    """Apply activation ``name`` (None: identity)."""
    return t if name is None else ACTIVATIONS[name](t)


def grad_from_output(name: str, out: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Gradient w.r.t. the pre-activation, for activations in :data:`DERIVATIVE_FROM_OUTPUT`."""
    if name == "relu":
        return grad * (out > 0)
    if name == "relu6":
        return grad * ((out > 0) & (out < 6))
    raise ValueError(f"the derivative of {name!r} needs the pre-activation value")
