"""Configuration tables as data: what a backend ships in ``data/`` and how a problem finds its configuration.

Every Triton backend keeps its tiles in JSON, per architecture and kernel family, and picks one from the
problem alone (no run-time autotuning, so the same problem gets the same kernel every time):

1. the exact layer, if the offline sweep (:mod:`conv_tools.sweep`) timed it: ``layers[family][layer key]``;
2. else the same layer swept at another batch or image size (:func:`.same_layer.nearest`: already compiled);
3. else the first *bucket* of the family whose conditions the problem's GEMM view meets (the last bucket has
   no condition).

A backend supplies the configuration types and the GEMM view of each family (``m`` rows, ``n`` columns,
``red`` the reduction per tap, optionally ``layout``); the reading, checking and choosing are here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..problem import ConvProblem
from .same_layer import nearest


def layer_key(problem: ConvProblem) -> str:
    """The key of the exact-layer tables: the problem key without the architecture (the file is per
    architecture)."""
    return problem.key.rsplit(" ", 1)[0]


def read_swept(path) -> dict:
    """A ``data/swept`` file's content, or nothing where the architecture was never swept."""
    path = Path(str(path))
    return json.loads(path.read_text()) if path.is_file() else {}


#: The conditions a bucket's ``when`` may give: inclusive upper bounds of the GEMM view, a divisor of its
#: columns, and the input dtypes and layouts it applies to.
CONDITIONS = ("max_m", "max_n", "max_red", "n_multiple_of", "dtypes", "layouts")


@dataclass(frozen=True)
class Bucket:
    """A configuration and the problems it is for (``when``: :data:`CONDITIONS`; empty: every problem)."""

    when: Mapping[str, object]
    config: object

    def matches(self, view: Mapping[str, object], dtype: str) -> bool:
        w = self.when
        return ((w.get("max_m") is None or view["m"] <= w["max_m"])
                and (w.get("max_n") is None or view["n"] <= w["max_n"])
                and (w.get("max_red") is None or view["red"] <= w["max_red"])
                and (w.get("n_multiple_of") is None or view["n"] % w["n_multiple_of"] == 0)
                and (w.get("dtypes") is None or dtype in w["dtypes"])
                and (w.get("layouts") is None or view.get("layout") in w["layouts"]))


def read_buckets(raw: Sequence[Mapping], parse: Callable[[Mapping], object], where: str,
                 conditions: Sequence[str] = CONDITIONS) -> tuple[Bucket, ...]:
    """A family's buckets from its JSON list (``{"when": {...}, "config": {...}}``), each configuration made by
    ``parse``; ``where`` names the list in errors. Unknown conditions and a conditioned last bucket are errors:
    a typo must not silently send problems to another bucket."""
    buckets = []
    for entry in raw:
        unknown = set(entry.get("when", {})) - set(conditions)
        if unknown:
            raise ValueError(f"{where}: unknown conditions {sorted(unknown)}")
        buckets.append(Bucket(dict(entry.get("when", {})), parse(entry["config"])))
    if not buckets or buckets[-1].when:
        raise ValueError(f"{where}: the last bucket must have no condition")
    return tuple(buckets)


def select(buckets: Sequence[Bucket], layers: Mapping[str, object], problem: ConvProblem,
           view: Callable[[], Mapping[str, object]], *, same_layer: bool = True) -> object:
    """The configuration of ``problem``: its exact layer in ``layers``, else (``same_layer``) the same layer's at
    the nearest batch and image size, else the first bucket that matches ``view()`` (computed only then)."""
    exact = layers.get(layer_key(problem))
    if exact is None and same_layer:
        exact = nearest(layers, problem)
    if exact is not None:
        return exact
    shape = view()
    for bucket in buckets:
        if bucket.matches(shape, problem.dtype):
            return bucket.config
    raise AssertionError("unreachable: the last bucket matches everything")


def distinct_configs(buckets: Sequence[Bucket], layers: Mapping[str, object]) -> tuple[object, ...]:
    """Every configuration a family's table can give (buckets, then exact layers), each once, in table order:
    what the compile checks compile and the sweep starts from."""
    return tuple(dict.fromkeys([b.config for b in buckets] + list(layers.values())))


class PackageData:
    """A backend package's ``data/`` folder: its configuration file, its swept winners per table, and the
    measured tuning tables it ships (``data/tables/<prefix>_<arch>.json``, read by the ranking)."""

    def __init__(self, package: str, tables_prefix: str) -> None:
        self.package, self.tables_prefix = package, tables_prefix

    def path(self, name: str):
        """A file under the package's ``data/`` (a :mod:`importlib.resources` traversable)."""
        return resources.files(self.package).joinpath(f"data/{name}")

    @functools.cache  # noqa: B019 (one instance per backend, alive for the process)
    def json(self, name: str = "configs.json") -> dict:
        """A JSON file under ``data/``, read once."""
        return json.loads(self.path(name).read_text())

    def swept_path(self, table: str):
        """Where the offline sweep's winners for ``table`` live (``data/swept/<table>.json``)."""
        return self.path(f"swept/{table}.json")

    def swept(self, table: str) -> dict:
        """The sweep's file for ``table``, or nothing where it was never swept."""
        return read_swept(self.swept_path(table))

    def swept_layers(self, table: str) -> dict[str, dict]:
        """The sweep's raw winners (family -> layer key -> configuration) where the file says they were
        measured, else nothing."""
        swept = self.swept(table)
        return dict(swept.get("layers", {})) if swept.get("measured") else {}

    def tuning_tables(self) -> list[Path]:
        """The shipped measured times, for the ``conv_core_tuning_tables`` hook."""
        folder = Path(str(self.path("tables")))
        return sorted(folder.glob(f"{self.tables_prefix}_*.json"))
