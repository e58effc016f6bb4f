"""Shape suites: the convolution layers of real models, as data.

A suite is one JSON file in ``conv_tools/data/suites/``, naming each distinct
convolution layer of a model once with the number of times it occurs
(``count``), so a benchmark can time every problem once and weight it by how
often the model runs it. The files hold geometry only; dtype, layout,
direction, batch and architecture are chosen when the suite is turned into
problems (:func:`suite_problems`), so one file serves every benchmark setting.

File format (one object per file)::

    {"name", "description", "source", "default_batch",
     "layers": [{"name", "in_channels", "out_channels", "input_size": [H, W],
                 "filter_size": [R, S], "stride": [..], "padding": [[l, r], [l, r]],
                 "dilation": [..], "groups", "bias", "count", "transposed"}]}

``input_size`` has one entry per spatial dimension (1D, 2D or 3D layers).
``transposed`` is optional (default false, written only when true). A
transposed layer is a model's ``ConvTranspose*d``, stored as the convolution C
whose data gradient it is: ``in_channels`` is the transposed layer's
``out_channels``, ``out_channels`` its ``in_channels``, ``input_size`` its
*output* size, and filter, stride, padding, dilation and groups are its own
(so its ``output_padding`` is implied by ``input_size``:
:attr:`SuiteLayer.output_padding`). Directions are the layer's, as a user of
the model means them, and map onto C's (:data:`TRANSPOSED_DIRECTIONS`): the
transposed forward is C's ``bwd_data``, which is exactly what cuDNN runs for
``F.conv_transpose*d`` (aten's ``bwd_data`` candidate is that call), its data
gradient is C's ``fwd`` (without bias: the bias belongs to the transposed
output), and its weight gradient is C's ``bwd_weight``. Consumers that label
directions show a transposed layer's with :func:`direction_label`
(``"fwd (transposed)"``).

:func:`conv_core.shapes.problems_from_shape` parses a one-off shape written on a command line
(``"n32 c64 k64 i56x56 f3x3 s1 p1"``) into the same ``(name, problem)`` form; it is exported here too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from conv_core.problem import ConvProblem
from conv_core.shapes import problems_from_shape
from conv_core.frontend.transposed import TRANSPOSED_DIRECTIONS, direction_label, layer_direction

__all__ = ["TRANSPOSED_DIRECTIONS", "Suite", "SuiteLayer", "available_suites", "direction_label", "layer_direction",
           "load_suite", "problems_from_shape", "suite_problems", "transposed_layers"]

_SUITE_DIR = "data/suites"
_LAYER_FIELDS = ("name", "in_channels", "out_channels", "input_size", "filter_size", "stride", "padding",
                 "dilation", "groups", "bias", "count")
_OPTIONAL_LAYER_FIELDS = ("transposed",)
_SUITE_FIELDS = ("name", "description", "source", "default_batch", "layers")


@dataclass(frozen=True)
class SuiteLayer:
    """One distinct convolution layer of a model and how many times the model runs it."""

    name: str
    in_channels: int
    out_channels: int
    input_size: tuple[int, ...]
    filter_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    groups: int = 1
    bias: bool = False
    count: int = 1
    transposed: bool = False

    def problem(self, batch: int, *, dtype: str = "bfloat16", layout: str = "channels_last",
                direction: str = "fwd", arch: str = "cpu") -> ConvProblem:
        """The problem that runs this layer in ``direction`` (the layer's; see the module docstring).

        Backward directions drop the bias, as :meth:`ConvProblem.with_direction`
        does; a transposed layer's problems never carry it (C's ``fwd`` is the
        layer's data gradient).
        """
        forward = ConvProblem(
            direction="fwd", batch=batch, in_channels=self.in_channels, out_channels=self.out_channels,
            input_size=self.input_size, filter_size=self.filter_size, stride=self.stride, padding=self.padding,
            dilation=self.dilation, groups=self.groups, dtype=dtype, layout=layout,
            bias=self.bias and not self.transposed, arch=arch)
        return forward.with_direction(TRANSPOSED_DIRECTIONS[direction] if self.transposed else direction)

    @property
    def output_padding(self) -> tuple[int, ...]:
        """A transposed layer's ``output_padding``: per dimension, the positions at the end of ``input_size`` that
        C's last window does not reach (always below the stride, as PyTorch requires)."""
        return tuple((i + lo + hi - d * (k - 1) - 1) % s for i, (lo, hi), k, s, d in
                     zip(self.input_size, self.padding, self.filter_size, self.stride, self.dilation))

    @classmethod
    def from_problem(cls, name: str, problem: ConvProblem, count: int = 1) -> SuiteLayer:
        """The layer of a (captured) problem; dtype, layout, direction, batch and arch are dropped."""
        return cls(name, problem.in_channels, problem.out_channels, problem.input_size, problem.filter_size,
                   problem.stride, problem.padding, problem.dilation, problem.groups, problem.bias, count)

    @classmethod
    def from_captured(cls, layer) -> SuiteLayer:
        """The layer of a :class:`conv_core.frontend.capture.CapturedLayer`: its convolution's geometry, and whether the
        model runs it transposed."""
        return dataclasses.replace(cls.from_problem(layer.name, layer.problem, layer.count),
                                   transposed=layer.transposed)

    def to_json(self) -> dict:
        return {"name": self.name, "in_channels": self.in_channels, "out_channels": self.out_channels,
                "input_size": list(self.input_size), "filter_size": list(self.filter_size),
                "stride": list(self.stride), "padding": [list(p) for p in self.padding],
                "dilation": list(self.dilation), "groups": self.groups, "bias": self.bias, "count": self.count,
                **({"transposed": True} if self.transposed else {})}


@dataclass(frozen=True)
class Suite:
    """A model's distinct convolution layers (see the module docstring for the file format)."""

    name: str
    description: str
    layers: tuple[SuiteLayer, ...]
    source: str = ""
    default_batch: int = 1

    @property
    def total_count(self) -> int:
        """How many convolutions one forward pass of the model runs."""
        return sum(layer.count for layer in self.layers)

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "default_batch": self.default_batch, "layers": [layer.to_json() for layer in self.layers]}


# ---- loading ------------------------------------------------------------------------------------


def _suite_files():
    return resources.files("conv_tools").joinpath(_SUITE_DIR)


def available_suites() -> list[str]:
    """Names of the suites shipped with conv-core, sorted."""
    return sorted(entry.name.removesuffix(".json") for entry in _suite_files().iterdir()
                  if entry.name.endswith(".json"))


def _parse_layer(raw: dict, where: str) -> SuiteLayer:
    missing = [f for f in _LAYER_FIELDS if f not in raw]
    unknown = sorted(set(raw) - set(_LAYER_FIELDS) - set(_OPTIONAL_LAYER_FIELDS))
    if missing or unknown:
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    try:
        layer = SuiteLayer(
            name=str(raw["name"]), in_channels=int(raw["in_channels"]), out_channels=int(raw["out_channels"]),
            input_size=tuple(int(v) for v in raw["input_size"]), filter_size=tuple(int(v) for v in raw["filter_size"]),
            stride=tuple(int(v) for v in raw["stride"]),
            padding=tuple((int(lo), int(hi)) for lo, hi in raw["padding"]),
            dilation=tuple(int(v) for v in raw["dilation"]), groups=int(raw["groups"]), bias=bool(raw["bias"]),
            count=int(raw["count"]), transposed=_flag(raw.get("transposed", False), "transposed"))
        if layer.count < 1:
            raise ValueError(f"count={layer.count} must be >= 1")
        layer.problem(1, dtype="float32", layout="channels_first")  # validates the geometry
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    return layer


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be true or false")
    return value


def _parse_suite(raw: dict, where: str) -> Suite:
    missing = [f for f in _SUITE_FIELDS if f not in raw]
    if missing:
        raise ValueError(f"{where}: missing fields {missing}")
    layers = tuple(_parse_layer(layer, f"{where}: layer {i} ({layer.get('name', '?')})")
                   for i, layer in enumerate(raw["layers"]))
    return Suite(name=raw["name"], description=raw["description"], layers=layers, source=raw["source"],
                 default_batch=int(raw["default_batch"]))


def load_suite(name: str) -> Suite:
    """The suite called ``name`` (see :func:`available_suites`), or the suite in the JSON file at path ``name``."""
    if name.endswith(".json") and Path(name).is_file():
        return _parse_suite(json.loads(Path(name).read_text()), name)
    entry = _suite_files().joinpath(f"{name}.json")
    if not re.fullmatch(r"[\w.-]+", name) or not entry.is_file():
        raise ValueError(f"unknown suite {name!r}; available: {', '.join(available_suites())}")
    return _parse_suite(json.loads(entry.read_text()), f"suite {name}")


def suite_problems(name: str | Suite, *, batch: int | None = None, dtype: str = "bfloat16",
                   layout: str = "channels_last", direction: str = "fwd",
                   arch: str = "cpu") -> list[tuple[str, ConvProblem]]:
    """``(layer name, problem)`` for each distinct layer of a suite; ``batch`` defaults to the suite's.

    ``direction`` is the layers' own: a transposed layer's problem is the convolution's direction that
    computes it (:data:`TRANSPOSED_DIRECTIONS`), so label it with :func:`transposed_layers`.
    """
    suite = name if isinstance(name, Suite) else load_suite(name)
    batch = suite.default_batch if batch is None else batch
    return [(layer.name, layer.problem(batch, dtype=dtype, layout=layout, direction=direction, arch=arch))
            for layer in suite.layers]


def transposed_layers(name: str | Suite) -> frozenset[str]:
    """Names of a suite's transposed layers, whose directions tables label with :func:`direction_label`."""
    suite = name if isinstance(name, Suite) else load_suite(name)
    return frozenset(layer.name for layer in suite.layers if layer.transposed)
