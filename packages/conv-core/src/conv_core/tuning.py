"""Measured times: the user's tuning database and the tables backends ship.

Both are JSON files of one format::

    {"format": "conv-core-tuning/1",
     "entries": [{"device": "NVIDIA H100 80GB HBM3", "arch": "sm_90",
                  "problem": "<ConvProblem.key>", "kernel": "<kernel id>",
                  "backend_version": "0.1.0", "us": 41.2, "status": "ok"}]}

A shipped table may also say which benchmark runs its times were folded from (``"runs": ["log #17:
2026-11-22 rdna-13 runs 33-36", ...]``, entries of ``docs/benchmarks/log.md``); readers of entries ignore it,
:func:`read_runs` returns it, and :func:`write_entries` keeps it when a file is rewritten.

``status`` is ``ok`` or ``broken`` (the candidate failed the correctness gate
of ``conv-core tune``; it is never ranked on that device). A database entry
counts only on the same device name and the same version of the kernel's
backend, so an upgrade never ranks on stale times; a shipped table counts on
any device of the same architecture, and only for the shipping backend's own kernels.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

FORMAT = "conv-core-tuning/1"

log = logging.getLogger("conv_core")


@dataclass(frozen=True)
class Entry:
    device: str
    arch: str
    problem: str
    kernel: str
    backend_version: str
    us: float
    status: str = "ok"


@dataclass(frozen=True)
class Timing:
    """A measured time for one candidate on one problem, and where it came from."""

    us: float
    status: str
    source: str


def read_entries(path: Path) -> list[Entry]:
    """Entries of a tuning file; an unreadable file is logged and treated as empty."""
    try:
        raw = json.loads(Path(path).read_text())
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r} is not {FORMAT!r}")
        return [Entry(**e) for e in raw["entries"]]
    except FileNotFoundError:
        return []
    except Exception as exc:
        log.warning("conv_core: ignoring tuning file %s: %s", path, exc)
        return []


def read_runs(path: Path) -> list[str]:
    """The runs a tuning file names as its sources (``[]`` if it names none or cannot be read)."""
    try:
        runs = json.loads(Path(path).read_text()).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(run) for run in runs] if isinstance(runs, list) else []


def write_entries(path: Path, entries: list[Entry], runs: list[str] | None = None) -> None:
    """Write entries atomically (a crash never leaves half a database).

    ``runs`` names the benchmark runs the times come from; ``None`` keeps those the file at ``path``
    already names, so that rewriting a table (``conv-core tune --export``) never loses its provenance.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = read_runs(path) if runs is None else list(runs)
    data = {"format": FORMAT, **({"runs": runs} if runs else {}),
            "entries": [asdict(e) for e in sorted(entries, key=lambda e: (e.problem, e.kernel))]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def merge_entries(old: list[Entry], new: list[Entry]) -> list[Entry]:
    """``old`` with every entry for the same (device, problem, kernel) replaced by ``new``'s."""
    def key(e: Entry):
        return (e.device, e.problem, e.kernel)

    merged = {key(e): e for e in old}
    merged.update({key(e): e for e in new})
    return list(merged.values())


class Timings:
    """Measured times for the current device, looked up by (problem key, kernel id).

    Database entries win over shipped tables; among tables, the first loaded wins.
    """

    def __init__(self, device_name: str, arch: str, versions: dict[str, str],
                 database: Path, tables: list[tuple[str, Path]]) -> None:
        self._index: dict[tuple[str, str], Timing] = {}
        for backend, path in tables:
            for e in read_entries(path):
                # A backend's table speaks for its own kernels only.
                if e.arch == arch and e.kernel.split(":", 1)[0] == backend:
                    self._index.setdefault((e.problem, e.kernel), Timing(e.us, e.status, f"table:{backend}"))
        for e in read_entries(database):
            backend = e.kernel.split(":", 1)[0]
            if e.device == device_name and versions.get(backend) == e.backend_version:
                self._index[(e.problem, e.kernel)] = Timing(e.us, e.status, "tuning-db")

    def get(self, problem_key: str, kernel_id: str) -> Timing | None:
        return self._index.get((problem_key, kernel_id))

    def __len__(self) -> int:
        return len(self._index)
