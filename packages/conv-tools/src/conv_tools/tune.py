"""Measuring candidates into the tuning database: :func:`run_tune`.

Tuning replaces the backends' estimates with times measured on this device,
which the ranking then prefers (see :mod:`conv_core.ranking`). Each candidate
first passes a correctness gate against the float64 reference: a fast wrong
kernel must never win, so a candidate that is wrong or raises is stored as
``broken`` (and never timed, nor ranked on this device). The ``aten`` fallback
is only ever stored as broken when it raises (see :func:`gate`).

Entries are keyed by device name and backend version (:mod:`conv_core.tuning`),
so an upgraded backend is re-ranked on its estimates until it is tuned again.
``export`` writes the same entries as a standalone table that a backend can
ship as package data for everyone with the same architecture.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from conv_core.arch import device_arch, device_name
from conv_core.backends import aten
from conv_core.candidate import Candidate
from conv_core.engine import get_engine
from conv_core.problem import ConvProblem
from conv_core.reference import Expected, compare, random_operands
from conv_core.tuning import Entry, merge_entries, read_entries, write_entries

from .bench import time_call
from .progress import Progress, progress_mode

#: ``on_result(layer, entry, detail)``: called once per candidate (detail: why broken, or "").
ResultCallback = Callable[[str, Entry, str], None]


def run_tune(problems: list[tuple[str, ConvProblem]], device: torch.device | str, *, reps: int, warmup: int,
             db_path: str | Path | None = None, export: str | Path | None = None, backend: str | None = None,
             progress: bool | str = True, on_result: ResultCallback | None = None) -> list[Entry]:
    """Gate, time and store every candidate of each ``(layer, problem)``; return the new entries.

    The entries are merged into the tuning database (``db_path``, default the
    ``CONV_CORE_TUNING_DB`` setting) and, if ``export`` is given, into that
    table file too. ``backend`` limits tuning to one backend's candidates and
    aten's (see :func:`tune_problem`). The engine is reset afterwards so the
    new times take effect at once.
    """
    device = torch.device(device)
    engine = get_engine()
    entries: list[Entry] = []
    with Progress(len(problems), "tune", mode=progress_mode(progress)) as bar:
        for layer, problem in problems:
            bar.step(layer)
            for entry, detail in tune_problem(problem, device, reps=reps, warmup=warmup, backend=backend):
                entries.append(entry)
                if on_result is not None:
                    on_result(layer, entry, detail)
    db = Path(db_path) if db_path is not None else engine.settings.tuning_db
    store(entries, db)
    if export is not None:
        store(entries, Path(export))
    engine.reset()
    return entries


def tune_problem(problem: ConvProblem, device: torch.device, *, reps: int, warmup: int,
                 backend: str | None = None) -> list[tuple[Entry, str]]:
    """(entry, detail) for every candidate of ``problem``; detail says why a candidate is broken (or kept).

    With ``backend``, that backend's candidates are tuned together with aten's: the ranking must compare
    the backend's measured times with aten's measured times on this device, never with aten's estimate.
    """
    engine = get_engine()
    versions = engine.versions()
    candidates, _ = engine.registry.candidates(problem, device, only=backend)
    if backend is not None and backend != aten.NAME:
        baseline, _ = engine.registry.candidates(problem, device, only=aten.NAME)
        candidates = baseline + candidates
    operands = random_operands(problem, device, seed=0)
    results = []
    for c in candidates:
        usable, detail = gate(problem, c, operands)
        us = 0.0
        if usable:
            timed = time_call(c.kernel_id, lambda c=c: c.run(*operands), device, reps=reps, warmup=warmup)
            usable, us = timed.ok, timed.us or 0.0
            detail = detail if timed.ok else f"failed when timed: {timed.error}"
        entry = Entry(device=device_name(device), arch=device_arch(device), problem=problem.key,
                      kernel=c.kernel_id, backend_version=versions.get(c.backend, ""), us=us,
                      status="ok" if usable else "broken")
        results.append((entry, detail))
    return results


def gate(problem: ConvProblem, candidate: Candidate, operands: tuple,
         known: Expected | None = None) -> tuple[bool, str]:
    """(usable, detail): whether ``candidate`` may be timed and ranked, and what went wrong if anything.

    A candidate that raises, or whose result is outside the reference
    tolerance, is not usable. The one exception is the ``aten`` fallback when
    its result is merely imprecise (PyTorch's own low-precision kernels, e.g.
    float16 backward on the CPU): excluding it would leave such a problem with
    no candidate at all, so it stays usable and the detail says why.
    """
    try:
        out = candidate.run(*operands)
    except Exception as exc:  # a kernel that raises is broken, not fatal
        return False, f"raised {type(exc).__name__}: {exc}".splitlines()[0]
    try:
        result = compare(problem, out, operands, candidate, known=known)
    except Exception as exc:  # e.g. a result whose shape cannot even be compared
        return False, f"result could not be compared: {type(exc).__name__}: {exc}".splitlines()[0]
    if result.ok:
        return True, ""
    if candidate.backend == aten.NAME:
        return True, f"kept as the fallback although outside the tolerance: {result.message}"
    return False, result.message


def store(entries: list[Entry], path: Path) -> None:
    """Merge ``entries`` into the tuning file at ``path`` (created if missing)."""
    write_entries(path, merge_entries(read_entries(path), entries))
