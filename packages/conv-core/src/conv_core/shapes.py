"""One convolution layer written on a command line: ``"n32 c64 k64 i56x56 f3x3 s1 p1"``.

``conv-core explain --shape`` and ``conv-core warmup --shape`` take one, and so do the tooling's benchmarks
(``conv-tools``); a full :attr:`ConvProblem.key` is accepted wherever a shape is.
"""

from __future__ import annotations

import re

from .problem import ConvProblem

_SHAPE_TOKEN = re.compile(r"([nckifspdgb])([\d.x]+)")
_REQUIRED = {"c": "in channels", "k": "out channels", "i": "input size", "f": "filter size"}


def _dims(text: str, ndim: int, letter: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in text.split("x"))
    if len(values) == 1:
        return values * ndim
    if len(values) != ndim:
        raise ValueError(f"{letter}{text}: expected 1 or {ndim} sizes (the input has {ndim} dimensions)")
    return values


def _padding(text: str, ndim: int) -> tuple[tuple[int, int], ...]:
    """``p1``, ``p1x2`` (symmetric per dimension) or ``p0.1x0.1`` (``left.right`` per dimension)."""
    pairs = []
    for part in text.split("x"):
        lo, _, hi = part.partition(".")
        pairs.append((int(lo), int(hi or lo)))
    if len(pairs) == 1:
        return tuple(pairs) * ndim
    if len(pairs) != ndim:
        raise ValueError(f"p{text}: expected 1 or {ndim} paddings (the input has {ndim} dimensions)")
    return tuple(pairs)


def _shape_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in text.replace(",", " ").split():
        m = _SHAPE_TOKEN.fullmatch(token)
        if not m:
            raise ValueError(f"cannot read {token!r} in shape {text!r}; expected tokens like n32 c64 k64 i56x56 "
                             f"f3x3 s1 p1 d1 g1 b0")
        letter, value = m.groups()
        if letter in fields:
            raise ValueError(f"{letter!r} is given twice in shape {text!r}")
        fields[letter] = value
    missing = [f"{letter} ({what})" for letter, what in _REQUIRED.items() if letter not in fields]
    if missing:
        raise ValueError(f"shape {text!r} lacks {', '.join(missing)}")
    return fields


def problems_from_shape(text: str, *, batch: int | None = None, dtype: str = "bfloat16",
                        layout: str = "channels_last", direction: str = "fwd",
                        arch: str = "cpu") -> list[tuple[str, ConvProblem]]:
    """The one ``(name, problem)`` of a shape written as ``"n32 c64 k64 i56x56 f3x3 s1 p1 d1 g1"``.

    ``c``, ``k``, ``i`` and ``f`` are required; ``s``, ``d`` (default 1), ``p``
    (default 0), ``g`` (default 1), ``b`` (bias, 0/1, default 0) and ``n``
    (default ``batch``, else 1) are optional. A full :attr:`ConvProblem.key`
    is accepted too, and then fixes every field itself. A list, so a command
    line can treat one shape like a one-layer suite; the name is the problem's
    :attr:`~ConvProblem.geometry_key`.
    """
    text = text.strip()
    if re.match(r"(fwd|bwd_data|bwd_weight)\s", text):
        problem = ConvProblem.from_key(text)
        return [(problem.geometry_key, problem)]
    fields = _shape_fields(text)
    size = tuple(int(v) for v in fields["i"].split("x"))
    ndim = len(size)
    if fields.get("b", "0") not in ("0", "1"):
        raise ValueError(f"b{fields['b']}: bias is b0 or b1")
    forward = ConvProblem(
        direction="fwd", batch=int(fields["n"]) if "n" in fields else (batch or 1), in_channels=int(fields["c"]),
        out_channels=int(fields["k"]), input_size=size, filter_size=_dims(fields["f"], ndim, "f"),
        stride=_dims(fields.get("s", "1"), ndim, "s"), padding=_padding(fields.get("p", "0"), ndim),
        dilation=_dims(fields.get("d", "1"), ndim, "d"), groups=int(fields.get("g", "1")), dtype=dtype,
        layout=layout, bias=fields.get("b", "0") == "1", arch=arch)
    problem = forward.with_direction(direction)
    return [(problem.geometry_key, problem)]
