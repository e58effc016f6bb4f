"""A table's exact-layer configurations, found again for the same layer at another batch or image size.

The offline sweep keys its configurations by the whole problem, batch and image size included. The same
model run at another batch size (or on larger images) finds none, and its layers take the buckets'
configurations instead: other tiles, so other kernels to compile on the first call at the new shape (and a
generic guess where the sweep had timed the layer). The configuration swept for the same layer (channels,
filter, stride, padding, dilation, groups, dtypes, layout, epilogue) at the nearest number of pixels is the
better guess, and it is already compiled. Within :data:`MAX_PIXEL_RATIO` only: the tile that suits 32 images
is no evidence for one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from ..problem import ConvProblem

#: Most pixels (batch x image) one of the two shapes may have per pixel of the other.
MAX_PIXEL_RATIO = 8.0

#: The fields of a problem that make its layer: all but the batch, the image size and the architecture.
LAYER_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem) if f.name not in ("batch", "input_size", "arch"))


@functools.lru_cache(maxsize=4096)
def _entry_problem(key: str, arch: str) -> ConvProblem:
    """The problem of an exact-layer key (a problem key without its architecture)."""
    return ConvProblem.from_key(f"{key} {arch}")


def _pixels(problem: ConvProblem) -> int:
    size = 1
    for extent in problem.input_size:
        size *= extent
    return problem.batch * size


def nearest(entries: Mapping[str, object], problem: ConvProblem) -> object | None:
    """The configuration of ``entries`` (exact-layer key -> configuration) swept for ``problem``'s layer at the
    batch and image size nearest to its own in pixels (ties: the smaller key), or None."""
    found = None
    for key, config in entries.items():
        entry = _entry_problem(key, problem.arch)
        if any(getattr(entry, name) != getattr(problem, name) for name in LAYER_FIELDS):
            continue
        ratio = max(_pixels(entry), _pixels(problem)) / min(_pixels(entry), _pixels(problem))
        if ratio <= MAX_PIXEL_RATIO and (found is None or (ratio, key) < found[:2]):
            found = (ratio, key, config)
    return None if found is None else found[2]
