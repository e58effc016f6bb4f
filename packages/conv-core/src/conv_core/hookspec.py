"""The hooks a backend implements (pluggy project ``conv_core``).

A backend is a module (or object) with functions marked ``@conv_core.hookimpl``
whose names are the hooks below, registered through the entry-point group
``conv_core.backends``::

    # pyproject.toml of the backend package
    [project.entry-points."conv_core.backends"]
    mybackend = "conv_mybackend.hooks"

The core calls each backend's hooks on their own, inside a guard: a hook that
raises, or returns something malformed, marks that backend as failed (see
``conv-core backends``) and the other backends carry on. A ``@hookimpl``
function named after none of the hooks below (a misspelling) fails the
backend's load (:class:`conv_core.plugins.Registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

import pluggy
import torch

from .candidate import BackendInfo, Candidate, Declined
from .problem import ConvProblem

PROJECT = "conv_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def conv_core_backend_info() -> BackendInfo:
    """Return the backend's identity: name, version, target architectures, description.

    Called once, when the backend is loaded. ``name`` is the prefix of every
    kernel id the backend returns; ``targets`` lists the architecture names
    (``sm_90``, ``gfx942``, ``cpu``...) its kernels can run on, for
    ``conv-core backends`` and for the compile checks of its own tests.
    """


@hookspec
def conv_core_candidates(problem: ConvProblem, device: torch.device) -> Sequence[Candidate | Declined]:
    """Return every candidate this backend has for ``problem`` on ``device``.

    Return an empty sequence, or better a :class:`Declined` saying why, when
    the backend cannot run the problem (wrong architecture, unsupported dtype,
    groups, size...). The call must be cheap and must not launch kernels: it
    runs once per new problem, and may run while a CUDA graph is being
    captured. Compile lazily, on the first ``run``.

    Each candidate's ``estimate_us`` should be the backend's honest prediction:
    without measured data the core ranks on it against every other backend.
    """


@hookspec
def conv_core_tuning_tables() -> Sequence[str | PathLike]:
    """Return paths of tuning tables this backend ships as package data.

    A table is a JSON file of measured times in the format of
    :mod:`conv_core.tuning` (written by ``conv-core tune --export``). For each
    candidate the ranking takes the best time source it has: the user's tuning
    database, then these tables, then the candidate's own estimate; all
    candidates are then ordered on those times together. A table's entries
    count only for this backend's own kernel ids.
    """
