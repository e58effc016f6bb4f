"""The front end's memory of calls: one typed cache per purpose, each keyed on what pins its answer.

A call's signature is checked, normalised and ranked once; afterwards the answer is looked up here.
Five questions are asked, each with its own key and its own kind of answer:

- ``eager``: how an eager ``conv*d`` call runs (:mod:`conv_core.functional`): its route;
- ``transposed``: how an eager ``conv_transpose*d`` call runs: its route (:mod:`conv_core.frontend.transposed_route`);
- ``op_routes``: how the opaque op ``conv_core::convolution`` runs its forward
  (:func:`conv_core.frontend.routes.forward`);
- ``backward``: the ranking a backward op runs when no route brought one (:mod:`conv_core.frontend.routes`);
- ``traced``: whether a plugin kernel wins a layer traced by ``torch.compile`` (:mod:`conv_core.frontend.ops`).

The caches belong to the process-wide engine's choices, but the engine does not hold them (it knows nothing of the
front end): :data:`CURRENT` pairs them with the engine they were made under, :func:`calls` makes new ones for a new
engine, and ``Engine.reset`` / ``conv_core.reset`` clear them through :func:`conv_core.engine.on_reset`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch

from .. import engine as engine_module
from .call import ConvArgs
from ..engine import Engine, get_engine, on_reset
from ..ranking import Ranking
from .transposed import TransposedArgs

#: The eager key's fields, in order. The key is a plain tuple built inline on every call: constructing a
#: NamedTuple there costs more than the whole lookup. The arguments are as given (lists frozen to tuples).
EAGER_KEY_FIELDS = ("input_shape", "input_stride", "input_dtype", "device", "weight_shape", "weight_dtype",
                    "no_bias", "needs_grad", "deterministic", "ndim", "stride", "padding", "dilation", "groups",
                    "activation", "out_dtype", "backend")
#: The transposed key's: the eager key's, with ``output_padding`` and the arguments in PyTorch's order.
TRANSPOSED_KEY_FIELDS = ("input_shape", "input_stride", "input_dtype", "device", "weight_shape", "weight_dtype",
                         "no_bias", "needs_grad", "deterministic", "ndim", "stride", "padding", "output_padding",
                         "groups", "dilation", "activation", "out_dtype", "backend")
EagerKey = tuple

#: Bumped whenever a route kept outside these caches may no longer be the engine's answer (:meth:`CallCaches.clear`,
#: ``conv_core.reset``, a shape capture): a converted module's memo of its direct routes (:mod:`conv_core.nn`)
#: holds the value it was made under and is ignored once it changes. A list, so that its readers bind it once.
GENERATION = [0]


def invalidate_memos() -> None:
    """Make every module's memo of direct routes stale (they are made again on their next call)."""
    GENERATION[0] += 1


class Runner(Protocol):
    """What the eager caches hold: a :class:`~conv_core.frontend.routes.Route` (or a transposed one) or a route with
    autograd's activation."""

    direct: bool

    def run(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor: ...


class OpKey(NamedTuple):
    """The opaque forward op's call: normalised arguments, operands' shapes, strides and dtypes."""

    args: ConvArgs
    input_shape: torch.Size
    input_stride: tuple[int, ...]
    input_dtype: torch.dtype
    device: torch.device
    weight_shape: torch.Size
    weight_dtype: torch.dtype
    bias_dtype: torch.dtype | None
    deterministic: bool


class BackwardKey(NamedTuple):
    """A backward op's call: its direction, the forward's arguments and shapes, dtype, layout and device."""

    direction: str
    args: ConvArgs
    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    dtype: str
    layout: str
    device: torch.device
    deterministic: bool


class TracedKey(NamedTuple):
    """A layer met while tracing: what the eager route of the same call would depend on."""

    args: ConvArgs | TransposedArgs
    input_shape: tuple[int, ...]
    input_stride: tuple[int, ...]
    input_dtype: torch.dtype
    device: str
    weight_shape: tuple[int, ...]
    bias_dtype: torch.dtype | None
    needs_grad: bool
    deterministic: bool


@dataclass
class CallCaches:
    """The five caches; see the module's text for who asks each."""

    eager: dict[EagerKey, Runner] = field(default_factory=dict)
    transposed: dict[EagerKey, Runner] = field(default_factory=dict)
    op_routes: dict[OpKey, Runner] = field(default_factory=dict)
    backward: dict[BackwardKey, Ranking] = field(default_factory=dict)
    traced: dict[TracedKey, bool] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget every answer (the next call of each signature decides again)."""
        invalidate_memos()
        for cache in (self.eager, self.transposed, self.op_routes, self.backward, self.traced):
            cache.clear()

    def routes(self) -> Iterator[Runner]:
        """Every route kept, eager and opaque-op ones (a route with autograd's activation gives its inner one)."""
        for runner in (*self.eager.values(), *self.transposed.values()):
            yield getattr(runner, "route", runner)
        yield from self.op_routes.values()


#: ``(engine, its caches)``: the hot path reads the caches straight from here while the engine is the same. Before
#: the first engine, an owner no engine is (not None: the process's first call, which makes the engine, would
#: otherwise keep its route in caches that :func:`calls` then replaces).
CURRENT: tuple[Engine | object, CallCaches] = (object(), CallCaches())


def calls() -> CallCaches:
    """The caches of the process-wide engine's choices (new, empty ones once the engine is a new one)."""
    global CURRENT
    engine = engine_module._engine or get_engine()
    owner, caches = CURRENT
    if owner is not engine:
        caches = CallCaches()
        CURRENT = (engine, caches)
        invalidate_memos()
    return caches


def _forget() -> None:
    CURRENT[1].clear()


on_reset(_forget)
