"""Shippable tables from two independent measurements: `conv-core tune` tables and `conv-core bench` JSON.

On the device machine about 1.5% of repeated measurements differ by more than
2x (see docs/benchmarks/2026-11-21-h100-rdna.md), in either direction. A table
that ranks on one noisy number can switch a layer away from aten on a fluke.
So each entry is combined conservatively, against the plugin: a plugin kernel
keeps the slower of its two times, aten the faster. A plugin then wins a layer
only where it was faster in both runs.

Entries the sweep of a plugin measured (``--sweep``: ``python -m conv_rdna.sweep run`` output, each
configuration gated against the reference) are added for kernel ids the tables lack, so a layer
whose winning configuration changed after the tune still ranks on a measured time.

Kernel ids the bench timed but the tables lack (a family added after the tune) are added from the
bench too, with its time: a new kernel then ranks on a measurement, never on its estimate alone.

Kernels rewritten since the tables were measured (``--drop rdna:few_channels_in,rdna:...``: kernel-id prefixes)
lose their entries on the problems the bench timed, so the bench's times of the new code replace the old code's
instead of being combined with them (the next independent run makes them conservative); elsewhere they keep the
old code's times.

Kernels whose earlier times are known to be wrong (``--replace rdna:winograd_f4x3,...``: kernel-id prefixes)
take the bench's time where it timed them, and keep their entries elsewhere: the multi-launch candidates, timed
before conv_core.timing's spin covered their host time (the rdna-7 page), lost up to 2.5x to launch gaps.

A backend that ships no table yet (``--new NAME``) gets one started from the bench's times of its kernels,
with the device of the other tables: its first measured table, to be made conservative by the next run.

Usage: python3 scripts/conservative_tables.py [--sweep SWEEP.json] [--new BACKEND] [--drop PREFIXES]
       [--replace PREFIXES] TABLES_DIR OUT_DIR BENCH.json...
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

from conv_core.tuning import Entry, read_entries, write_entries


def bench_times(paths) -> dict[tuple[str, str], float]:
    times = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            for m in row["measurements"]:
                if m["us"]:
                    times[(row["problem"], m["kernel"])] = m["us"]
    return times


def sweep_entries(path: str, backend: str, device: str, version: str) -> list[Entry]:
    """Table entries from a sweep's gated timings (kernel id from the kernel and configuration name)."""
    data = json.loads(Path(path).read_text())
    return [Entry(device, data["arch"], f"{row['layer']} {data['arch']}",
                  f"{backend}:{row['kernel']}:{row['config']}",
                  version, row["us"]) for row in data["results"] if row["us"] is not None]


def start_table(backend: str, times: dict, like: Path, out: Path) -> None:
    """``<backend>_<arch>.json`` in ``out`` from the bench times of ``backend``'s kernels, on the device and
    architecture of the table ``like``."""
    template = read_entries(like)[0]
    entries = [replace(template, problem=problem, kernel=kernel, us=us, backend_version=version(f"conv-{backend}"))
               for (problem, kernel), us in sorted(times.items()) if kernel.startswith(backend + ":")]
    write_entries(out / f"{backend}_{template.arch}.json", entries)
    print(f"{backend}_{template.arch}.json: {len(entries)} entries (new)")


def main(argv=None) -> int:
    args = list(argv or sys.argv[1:])
    sweep = new = None
    drop = replaced = ()
    if args[0] == "--sweep":
        sweep, args = args[1], args[2:]
    if args[0] == "--new":
        new, args = args[1], args[2:]
    if args[0] == "--drop":
        drop, args = tuple(f"{prefix}:" for prefix in args[1].split(",")), args[2:]
    if args[0] == "--replace":
        replaced, args = tuple(f"{prefix}:" for prefix in args[1].split(",")), args[2:]
    tables, out, *benches = args
    again = bench_times(benches)
    timed = {problem for problem, _ in again}
    if new:
        start_table(new, again, sorted(Path(tables).glob("*.json"))[0], Path(out))
    for path in sorted(Path(tables).glob("*.json")):
        entries = []
        for e in read_entries(path):
            if drop and e.kernel.startswith(drop) and e.problem in timed:
                continue
            other = again.get((e.problem, e.kernel))
            if e.status == "ok" and other is not None and replaced and e.kernel.startswith(replaced):
                e = replace(e, us=other)
            elif e.status == "ok" and other is not None:
                keep = min if e.kernel.startswith("aten:") else max
                e = replace(e, us=keep(e.us, other))
            entries.append(e)
        if not path.name.startswith("aten_"):
            backend, template = path.name.split("_", 1)[0], entries[0]
            known = {(e.problem, e.kernel) for e in entries}
            entries += [replace(template, problem=problem, kernel=kernel, us=us)
                        for (problem, kernel), us in sorted(again.items())
                        if kernel.startswith(backend + ":") and (problem, kernel) not in known]
            known = {(e.problem, e.kernel) for e in entries}
            if sweep:
                entries += [e for e in sweep_entries(sweep, backend, template.device, template.backend_version)
                            if (e.problem, e.kernel) not in known]
        write_entries(Path(out) / path.name, entries)
        print(f"{path.name}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
