"""The shipped tables' pipeline: split a tuning database by backend, fold benchmark runs in conservatively.

A backend ships ``data/tables/<backend>_<arch>.json`` (:mod:`conv_core.tuning`'s format) with the times
its kernels took on one architecture, and aten's side ships with conv-core. Those tables come from
GPU runs (``scripts/gpu_run.sh``): ``conv-core tune`` writes one database that :func:`split` cuts into
one table per backend, and ``conv-core bench`` runs are folded into existing tables by :func:`combine`.
Each writer names the run it folded in (``runs``), so a shipped table always says where its times came from.

On the device machine about 1.5% of repeated measurements differ by more than 2x, in either direction,
and a table that ranks on one noisy number can switch a layer away from aten on a fluke. So
:func:`combine` folds a bench into a table conservatively, against the plugin: a plugin kernel keeps the
slower of its two times, aten the faster; a plugin then wins a layer only where it was faster in both runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from conv_core.tuning import Entry, merge_entries, read_entries, read_runs, write_entries


@dataclass(frozen=True)
class Fold:
    """How :func:`combine` treats some kernels (each a tuple of kernel-id prefixes such as ``rdna:winograd``).

    - ``drop``: rewritten since the tables were measured; their entries on the problems the bench timed
      go, so the bench's times of the new code replace the old code's (the next run makes them conservative);
    - ``replace``: their earlier times are known to be wrong; the bench's time replaces them where it
      timed them (multi-launch candidates timed before the timing's spin covered their host time);
    - ``sweep``: a sweep's output (``python -m conv_<name>.sweep run``): its gated timings are added for
      kernel ids the tables lack, so a layer whose winning configuration changed ranks on a measured time;
    - ``new``: a backend that ships no table yet gets one started from the bench's times of its kernels.
    """

    drop: tuple[str, ...] = ()
    replace: tuple[str, ...] = ()
    sweep: str | None = None
    new: str | None = None


def bench_times(paths) -> dict[tuple[str, str], float]:
    """``(problem key, kernel id) -> us`` of every measured candidate of ``conv-core bench --json`` files."""
    times = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            for m in row["measurements"]:
                if m["us"]:
                    times[(row["problem"], m["kernel"])] = m["us"]
    return times


def sweep_entries(path: str | Path, backend: str, device: str, version: str) -> list[Entry]:
    """Table entries from a sweep's gated timings (kernel id from the kernel and configuration name)."""
    data = json.loads(Path(path).read_text())
    return [Entry(device, data["arch"], f"{row['layer']} {data['arch']}", f"{backend}:{row['kernel']}:{row['config']}",
                  version, row["us"]) for row in data["results"] if row["us"] is not None]


def with_run(runs: list[str], run: str | None) -> list[str]:
    """``runs`` with ``run`` appended (once)."""
    return runs + [run] if run and run not in runs else list(runs)


def split(database: str | Path, out: str | Path, run: str | None = None, merge: bool = False) -> dict[str, int]:
    """``out/<backend>_<arch>.json`` for each (backend, arch) of a tuning database; returns entries per file.

    ``conv-core tune`` writes every backend's measurements into one database, and a backend ships only its
    own kernels' times (the core ignores the rest of a table). ``run`` names the run the database came from.
    With ``merge``, a table already in ``out`` keeps its entries and runs and takes the database's (which win
    where both timed a kernel on a problem): how a tuning of new suites joins the shipped tables.
    """
    groups = defaultdict(list)
    for entry in read_entries(Path(database)):
        groups[(entry.kernel.split(":", 1)[0], entry.arch)].append(entry)
    written = {}
    for (backend, arch), entries in sorted(groups.items()):
        path = Path(out) / f"{backend}_{arch}.json"
        runs = []
        if merge and path.exists():
            entries, runs = merge_entries(read_entries(path), entries), read_runs(path)
        write_entries(path, entries, runs=with_run(runs, run))
        written[path.name] = len(entries)
    return written


def folded(entries: list[Entry], again: dict[tuple[str, str], float], fold: Fold) -> list[Entry]:
    """``entries`` with the bench times ``again`` folded in (see :class:`Fold`)."""
    timed = {problem for problem, _ in again}
    kept = []
    for e in entries:
        if fold.drop and e.kernel.startswith(fold.drop) and e.problem in timed:
            continue
        other = again.get((e.problem, e.kernel))
        if e.status == "ok" and other is not None:
            if fold.replace and e.kernel.startswith(fold.replace):
                e = replace(e, us=other)
            else:
                e = replace(e, us=(min if e.kernel.startswith("aten:") else max)(e.us, other))
        kept.append(e)
    return kept


def added(entries: list[Entry], backend: str, again: dict[tuple[str, str], float], fold: Fold) -> list[Entry]:
    """Entries for ``backend``'s kernels the table lacks: the bench's times, then the sweep's.

    A kernel family added after the table was measured then ranks on a measurement, never on its estimate;
    a suite added after it gets aten's times as well as the plugin's, since a plugin displaces aten only
    where both were measured.
    """
    template = entries[0]
    known = {(e.problem, e.kernel) for e in entries}
    new = [replace(template, problem=problem, kernel=kernel, us=us) for (problem, kernel), us in sorted(again.items())
           if kernel.startswith(backend + ":") and (problem, kernel) not in known]
    known |= {(e.problem, e.kernel) for e in new}
    if fold.sweep:
        new += [e for e in sweep_entries(fold.sweep, backend, template.device, template.backend_version)
                if (e.problem, e.kernel) not in known]
    return new


def start_table(backend: str, version: str, again: dict[tuple[str, str], float], like: Path) -> list[Entry]:
    """A first table of ``backend`` from the bench's times of its kernels, on the device and architecture of
    the table ``like``."""
    template = read_entries(like)[0]
    return [replace(template, problem=problem, kernel=kernel, us=us, backend_version=version)
            for (problem, kernel), us in sorted(again.items()) if kernel.startswith(backend + ":")]


def combine(tables: str | Path, out: str | Path, benches: list[str], fold: Fold = Fold(),
            run: str | None = None) -> dict[str, int]:
    """Every table of the folder ``tables`` with the bench runs ``benches`` folded in, written to ``out``.

    ``run`` (e.g. ``"log #19: 2026-11-22 gluon-5 runs 15a/15b"``) is added to each written table's runs.
    Returns the entries per written file.
    """
    again = bench_times(benches)
    paths = sorted(Path(tables).glob("*.json"))
    written = {}
    if fold.new:
        from importlib.metadata import version

        entries = start_table(fold.new, version(f"conv-{fold.new}"), again, paths[0])
        name = f"{fold.new}_{entries[0].arch}.json" if entries else f"{fold.new}.json"
        write_entries(Path(out) / name, entries, runs=with_run([], run))
        written[name] = len(entries)
    for path in paths:
        entries = folded(read_entries(path), again, fold)
        backend = path.name.split("_", 1)[0]
        if entries:  # aten too: a plugin displaces it only where both were measured (a sweep is a plugin's)
            entries += added(entries, backend, again, fold if backend != "aten" else replace(fold, sweep=None))
        write_entries(Path(out) / path.name, entries, runs=with_run(read_runs(path), run))
        written[path.name] = len(entries)
    return written


def summary(path: str | Path) -> dict:
    """What a table holds: its runs, and its entries counted by direction, layout and kernel family."""
    entries = read_entries(Path(path))
    counts: dict[str, int] = defaultdict(int)
    for e in entries:
        words = e.problem.split()
        layout = next((w for w in words if w in ("cf", "cl")), "?")
        family = ":".join(e.kernel.split(":")[:2])
        counts[f"{words[0]} {'nchw' if layout == 'cf' else 'nhwc'} {family}"] += 1
    return {"path": str(path), "runs": read_runs(Path(path)), "entries": len(entries),
            "broken": sum(e.status != "ok" for e in entries), "arch": sorted({e.arch for e in entries}),
            "counts": dict(sorted(counts.items()))}
