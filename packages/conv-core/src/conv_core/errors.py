"""The error a convolution's arguments raise: as ``ValueError`` and ``RuntimeError`` both.

PyTorch's convolutions refuse a bad shape, padding, stride, dilation, groups or bias with a ``RuntimeError``;
conv-core names the argument at fault more clearly, and its callers have caught its ``ValueError`` so far.
:class:`ConvArgumentError` is both, so that ``except RuntimeError`` around a model keeps working after
:func:`conv_core.convert`, and ``except ValueError`` keeps working too. An argument of the wrong type (a float
stride, a string padding where only numbers are allowed) is a ``TypeError``, as PyTorch's.
"""

from __future__ import annotations


class ConvArgumentError(ValueError, RuntimeError):
    """A convolution call's arguments cannot form a convolution; the message names the argument."""
