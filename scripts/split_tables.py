"""Split a tuning database into one shippable table per backend and architecture.

``conv-core tune`` writes every backend's measurements into one database; a
backend ships only its own kernels' times (the core ignores the rest), so
this writes ``OUT/<backend>_<arch>.json`` for each (backend, arch) present.

Usage: python3 scripts/split_tables.py TUNING_DB OUT_DIR
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from conv_core.tuning import read_entries, write_entries


def main(argv=None) -> int:
    database, out = (argv or sys.argv[1:])[:2]
    groups = defaultdict(list)
    for entry in read_entries(Path(database)):
        groups[(entry.kernel.split(":", 1)[0], entry.arch)].append(entry)
    for (backend, arch), entries in sorted(groups.items()):
        write_entries(Path(out) / f"{backend}_{arch}.json", entries)
        print(f"{backend}_{arch}.json: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
