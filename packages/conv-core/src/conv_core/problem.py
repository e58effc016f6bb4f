"""What a convolution problem is: :class:`ConvProblem`.

A problem is everything a backend needs to decide whether it can run a
convolution and how fast: the geometry (batch, channels, groups, spatial sizes,
filter, stride, asymmetric padding, dilation), the direction, the dtypes, the
memory layout, the fused epilogue and the device architecture. It holds no
tensors, so it can key caches, tuning tables and the ranking.

The three directions share one geometry, always described as the *forward*
convolution ``y = conv(x, w)``:

- ``fwd``:        ``y  = conv(x, w) (+ bias, activation)``
- ``bwd_data``:   ``dx = conv_backward_input(dy, w) (+ bias, activation)``
- ``bwd_weight``: ``dw = conv_backward_weight(x, dy)``

A data gradient carries an epilogue only as a transposed convolution's forward (its bias is per *input*
channel of the geometry, the transposed layer's output channels); such a problem is offered only to candidates
tagged ``transposed_epilogue`` (:data:`conv_core.candidate.KNOWN_TAGS`), since a backend written before may
ignore an epilogue it never expected there.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from dataclasses import dataclass, replace
from typing import Literal

import torch

from . import activations
from .errors import ConvArgumentError
from .layout import dense_strides

Direction = Literal["fwd", "bwd_data", "bwd_weight"]
Layout = Literal["channels_first", "channels_last"]

DIRECTIONS: tuple[str, ...] = ("fwd", "bwd_data", "bwd_weight")
LAYOUTS: tuple[str, ...] = ("channels_first", "channels_last")

#: Canonical dtype names and their short spelling in problem keys.
DTYPES: dict[str, str] = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_DTYPE_BY_SHORT = {short: name for name, short in DTYPES.items()}
_LAYOUT_SHORT = {"channels_first": "cf", "channels_last": "cl"}
_LAYOUT_BY_SHORT = {short: name for name, short in _LAYOUT_SHORT.items()}


def dtype_name(dtype: torch.dtype | str) -> str:
    """Canonical name (``"bfloat16"``) of a torch dtype or a name/short name; clear error otherwise."""
    name = str(dtype).removeprefix("torch.")
    name = _DTYPE_BY_SHORT.get(name, {"half": "float16", "float": "float32", "double": "float64"}.get(name, name))
    if name not in DTYPES:
        raise ConvArgumentError(f"dtype {dtype} is not supported; supported: {', '.join(DTYPES)}")
    return name


@functools.cache
def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a canonical dtype name."""
    return getattr(torch, dtype_name(name))


def element_size(name: str) -> int:
    return torch_dtype(name).itemsize


def per_dim(value, ndim: int, field: str) -> tuple[int, ...]:
    """``value`` as one int per spatial dimension (an int, or a sequence of 1 or ``ndim`` ints).

    A value that is no int or sequence of ints is a ``TypeError``, a sequence of another length a
    :class:`~conv_core.errors.ConvArgumentError`, each naming ``field``, where ``torch.nn.functional`` refuses it too.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * ndim
    try:
        items = tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(f"{field}={value!r} must be an int or a tuple of {ndim} ints") from None
    if len(items) == 1:
        return items * ndim
    if len(items) != ndim:
        raise ConvArgumentError(f"{field}={value} must have {ndim} entries for a {ndim}D convolution")
    return items


def normalize_padding(padding, ndim: int, filter_size, dilation, stride) -> tuple[tuple[int, int], ...]:
    """Padding as ``((left, right), ...)`` per spatial dimension.

    Accepts what ``torch.nn.functional`` accepts (an int, one int per dimension,
    ``"same"``, ``"valid"``) plus explicit ``(left, right)`` pairs per dimension.
    ``"same"`` puts the odd extra element on the right, as PyTorch does.
    """
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * ndim
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ConvArgumentError(f"padding='same' is not supported for stride={tuple(stride)}; "
                                        "it needs stride 1")
            pairs = []
            for k, d in zip(filter_size, dilation):
                total = d * (k - 1)
                pairs.append((total // 2, total - total // 2))
            return tuple(pairs)
        raise ConvArgumentError(f"padding={padding!r} is not supported; use an int, a tuple, 'same' or 'valid'")
    if isinstance(padding, int) and not isinstance(padding, bool):
        return ((padding, padding),) * ndim
    if not isinstance(padding, (tuple, list)):
        raise TypeError(f"padding={padding!r} must be an int, a tuple of ints, 'same' or 'valid'")
    padding = tuple(padding)
    if padding and all(isinstance(p, (tuple, list)) for p in padding):
        if len(padding) != ndim or any(len(p) != 2 for p in padding):
            raise ConvArgumentError(f"padding={padding} must be {ndim} (left, right) pairs")
        return tuple((operator.index(a), operator.index(b)) for a, b in padding)
    return tuple((p, p) for p in per_dim(padding, ndim, "padding"))


@dataclass(frozen=True)
class ConvProblem:
    """One convolution problem, in one direction, on one architecture.

    Frozen and hashable; :attr:`key` is a stable string that round-trips
    through :meth:`from_key`. Construction validates the geometry and raises a
    ``ValueError`` naming the offending field.
    """

    direction: str
    batch: int
    in_channels: int
    out_channels: int
    input_size: tuple[int, ...]
    filter_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    groups: int = 1
    dtype: str = "float32"
    weight_dtype: str = ""
    out_dtype: str = ""
    layout: str = "channels_first"
    bias: bool = False
    activation: str | None = None
    arch: str = "cpu"

    def __post_init__(self) -> None:
        ndim = len(self.input_size)
        set_ = object.__setattr__
        set_(self, "input_size", tuple(int(v) for v in self.input_size))
        set_(self, "filter_size", per_dim(self.filter_size, ndim, "filter_size"))
        set_(self, "stride", per_dim(self.stride, ndim, "stride"))
        set_(self, "dilation", per_dim(self.dilation, ndim, "dilation"))
        set_(self, "padding", normalize_padding(self.padding, ndim, self.filter_size, self.dilation, self.stride))
        set_(self, "dtype", dtype_name(self.dtype))
        set_(self, "weight_dtype", dtype_name(self.weight_dtype or self.dtype))
        set_(self, "out_dtype", dtype_name(self.out_dtype or self.dtype))
        self._validate()

    def _validate(self) -> None:
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ConvArgumentError(f"invalid convolution problem: {field}: {why}")

        need(self.direction in DIRECTIONS, "direction", f"{self.direction!r} is not one of {DIRECTIONS}")
        need(1 <= self.ndim <= 3, "input_size", f"{self.input_size} must have 1 to 3 spatial dimensions")
        need(self.batch >= 1, "batch", f"{self.batch} must be >= 1")
        need(self.groups >= 1, "groups", f"{self.groups} must be >= 1")
        need(self.in_channels >= 1, "in_channels", f"{self.in_channels} must be >= 1")
        need(self.out_channels >= 1, "out_channels", f"{self.out_channels} must be >= 1")
        need(self.in_channels % self.groups == 0, "in_channels",
             f"{self.in_channels} is not divisible by groups={self.groups}")
        need(self.out_channels % self.groups == 0, "out_channels",
             f"{self.out_channels} is not divisible by groups={self.groups}")
        need(all(v >= 1 for v in self.input_size), "input_size", f"{self.input_size} has a size < 1")
        need(all(v >= 1 for v in self.filter_size), "filter_size", f"{self.filter_size} has a size < 1")
        need(all(v >= 1 for v in self.stride), "stride", f"{self.stride} must be >= 1")
        need(all(v >= 1 for v in self.dilation), "dilation", f"{self.dilation} must be >= 1")
        need(all(a >= 0 and b >= 0 for a, b in self.padding), "padding", f"{self.padding} has a negative entry")
        need(self.layout in LAYOUTS, "layout", f"{self.layout!r} is not one of {LAYOUTS}")
        need(all(v >= 1 for v in self.output_size), "output_size",
             f"{self.output_size} < 1: the filter {self.filter_size} (dilation {self.dilation}) does not fit "
             f"the padded input {self.input_size} + {self.padding}")
        activations.check_activation(self.activation)
        if self.direction == "bwd_weight":
            need(not self.bias and self.activation is None, "direction",
                 "bias and activation belong to the forward and data-gradient problems only")

    # ---- shapes --------------------------------------------------------------

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions (1, 2 or 3)."""
        return len(self.input_size)

    @functools.cached_property
    def output_size(self) -> tuple[int, ...]:
        """Spatial size of the forward output (computed once: a plugin call allocates its result from it)."""
        return tuple(
            (i + lo + hi - d * (k - 1) - 1) // s + 1
            for i, (lo, hi), k, s, d in zip(self.input_size, self.padding, self.filter_size, self.stride, self.dilation)
        )

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, self.in_channels, *self.input_size)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels // self.groups, *self.filter_size)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, self.out_channels, *self.output_size)

    @property
    def symmetric_padding(self) -> tuple[int, ...] | None:
        """Per-dimension padding if left == right everywhere, else None."""
        if all(a == b for a, b in self.padding):
            return tuple(a for a, _ in self.padding)
        return None

    @functools.cached_property
    def result_shape(self) -> tuple[int, ...]:
        """Shape of what this direction computes: y, dx or dw."""
        return {"fwd": self.output_shape, "bwd_data": self.input_shape, "bwd_weight": self.weight_shape}[self.direction]

    @property
    def result_dtype(self) -> str:
        """Dtype of what this direction computes."""
        return {"fwd": self.out_dtype, "bwd_data": self.dtype, "bwd_weight": self.weight_dtype}[self.direction]

    @property
    def operand_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shapes of the direction's two tensor operands, in the order ``Candidate.run`` takes them."""
        return {
            "fwd": (self.input_shape, self.weight_shape),
            "bwd_data": (self.output_shape, self.weight_shape),
            "bwd_weight": (self.input_shape, self.output_shape),
        }[self.direction]

    @property
    def operand_dtypes(self) -> tuple[str, str]:
        return {
            "fwd": (self.dtype, self.weight_dtype),
            "bwd_data": (self.out_dtype, self.weight_dtype),
            "bwd_weight": (self.dtype, self.out_dtype),
        }[self.direction]

    # ---- cost ----------------------------------------------------------------

    @property
    def macs(self) -> int:
        """Multiply-accumulates; the same count in all three directions."""
        return (self.batch * self.out_channels * math.prod(self.output_size)
                * (self.in_channels // self.groups) * math.prod(self.filter_size))

    @property
    def flops(self) -> int:
        return 2 * self.macs

    @property
    def min_bytes(self) -> int:
        """Fewest bytes any kernel must move: each operand read once, the result written once."""
        count = sum(math.prod(s) * element_size(d) for s, d in zip(self.operand_shapes, self.operand_dtypes))
        count += math.prod(self.result_shape) * element_size(self.result_dtype)
        if self.bias:
            count += self.result_shape[1] * element_size(self.out_dtype)
        return count

    @property
    def transposed_epilogue(self) -> bool:
        """Whether this is a data gradient with a bias or an activation: a transposed convolution's forward with
        its epilogue fused, which only candidates tagged ``transposed_epilogue`` are offered."""
        return self.direction == "bwd_data" and (self.bias or self.activation is not None)

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM of this direction, per group."""
        npix_out = self.batch * math.prod(self.output_size)
        cin, cout = self.in_channels // self.groups, self.out_channels // self.groups
        taps = math.prod(self.filter_size)
        if self.direction == "fwd":
            return npix_out, cout, cin * taps
        if self.direction == "bwd_data":
            return self.batch * math.prod(self.input_size), cin, cout * taps
        return cout, cin * taps, npix_out

    @property
    def reduction_length(self) -> int:
        """Terms summed into each result element (bounds rounding error; see ``reference``)."""
        if self.direction == "bwd_data":
            # Taps landing on one input element: those with r*d in one residue class mod s.
            taps = math.prod(-(-k // (s // math.gcd(s, d)))
                             for k, s, d in zip(self.filter_size, self.stride, self.dilation))
            return (self.out_channels // self.groups) * taps
        return self.gemm_shape[2]

    # ---- variants ------------------------------------------------------------

    def with_direction(self, direction: str) -> ConvProblem:
        """The same geometry in another direction.

        Backward problems drop the epilogue and take the output gradient in the
        input's dtype (the core casts it), so ``out_dtype == dtype`` for them.
        """
        if direction == "fwd":
            return replace(self, direction=direction)
        return replace(self, direction=direction, bias=False, activation=None, out_dtype=self.dtype)

    def replace(self, **changes) -> ConvProblem:
        return replace(self, **changes)

    # ---- tensors -------------------------------------------------------------

    def empty_result(self, device: torch.device | str) -> torch.Tensor:
        """An uninitialised tensor for this direction's result, in the problem's layout (a plugin call allocates
        it on every run, so its strides and dtype are worked out once per problem)."""
        shape, strides, dtype = self._result_layout
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)

    @functools.cached_property
    def _result_layout(self) -> tuple[tuple[int, ...], tuple[int, ...], torch.dtype]:
        return self.result_shape, dense_strides(self.result_shape, self.layout), torch_dtype(self.result_dtype)

    # ---- keys ----------------------------------------------------------------

    @functools.cached_property
    def key(self) -> str:
        """Stable, human-readable key; ``ConvProblem.from_key(p.key) == p``."""
        def dims(values) -> str:
            return "x".join(str(v) for v in values)

        pad = "x".join(f"{a}.{b}" for a, b in self.padding)
        dt = ".".join(DTYPES[d] for d in (self.dtype, self.weight_dtype, self.out_dtype))
        return (f"{self.direction} n{self.batch} c{self.in_channels} k{self.out_channels} g{self.groups} "
                f"i{dims(self.input_size)} f{dims(self.filter_size)} s{dims(self.stride)} p{pad} "
                f"d{dims(self.dilation)} {dt} {_LAYOUT_SHORT[self.layout]} b{int(self.bias)} "
                f"a{self.activation or '-'} {self.arch}")

    @property
    def geometry_key(self) -> str:
        """The key without direction, dtypes, layout, epilogue and arch: what a shape suite names."""
        return " ".join(self.key.split()[1:10])

    @classmethod
    def from_key(cls, key: str) -> ConvProblem:
        """Parse a key written by :attr:`key`."""
        m = re.fullmatch(
            r"(\w+) n(\d+) c(\d+) k(\d+) g(\d+) i([\dx]+) f([\dx]+) s([\dx]+) p([\d.x]+) d([\dx]+) "
            r"(\w+)\.(\w+)\.(\w+) (cf|cl) b([01]) a(\S+) (\S+)", key.strip())
        if not m:
            raise ConvArgumentError(f"not a problem key: {key!r}")
        (direction, n, c, k, g, i, f, s, p, d, dt, wt, ot, layout, bias, act, arch) = m.groups()

        def ints(text: str) -> tuple[int, ...]:
            return tuple(int(v) for v in text.split("x"))

        pad = tuple(tuple(int(v) for v in pair.split(".")) for pair in p.split("x"))
        return cls(direction=direction, batch=int(n), in_channels=int(c), out_channels=int(k), groups=int(g),
                   input_size=ints(i), filter_size=ints(f), stride=ints(s), padding=pad, dilation=ints(d),
                   dtype=dt, weight_dtype=wt, out_dtype=ot, layout=_LAYOUT_BY_SHORT[layout], bias=bias == "1",
                   activation=None if act == "-" else act, arch=arch)

    def __str__(self) -> str:
        return self.key


def check_call_tensors(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int) -> None:
    """Reject a call whose tensors cannot form a convolution, naming what is wrong."""
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("input and weight must be tensors")
    if input.dim() not in (3, 4, 5):
        raise ConvArgumentError(f"input must be 3D, 4D or 5D (batch, channels, *spatial); "
                                f"got shape {tuple(input.shape)}")
    if weight.dim() != input.dim():
        raise ConvArgumentError(f"weight shape {tuple(weight.shape)} must have the same rank as input "
                                f"{tuple(input.shape)}")
    if weight.device != input.device:
        raise ConvArgumentError(f"weight is on {weight.device} but input is on {input.device}")
    if not isinstance(groups, int) or groups < 1:
        raise ConvArgumentError(f"groups={groups} must be a positive int")
    if input.shape[1] != weight.shape[1] * groups:
        raise ConvArgumentError(f"input has {input.shape[1]} channels but weight {tuple(weight.shape)} with "
                                f"groups={groups} expects {weight.shape[1] * groups}")
    for name, t in (("input", input), ("weight", weight)):
        dtype_name(t.dtype)
        if t.numel() == 0:
            raise ConvArgumentError(f"{name} has shape {tuple(t.shape)} with a zero-size dimension")
    if bias is not None:
        if bias.shape != (weight.shape[0],):
            raise ConvArgumentError(f"bias shape {tuple(bias.shape)} must be ({weight.shape[0]},)")
        if bias.device != input.device:
            raise ConvArgumentError(f"bias is on {bias.device} but input is on {input.device}")
