"""What every benchmark record says about itself: when, on what, with which software, by which command.

The real-model, host-time, held-out ranking and DDP benchmarks each write one JSON record; the page
generator (:mod:`conv_tools.bench_page`) reads them back, so a page can always say which run and which
exact command every figure came from.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from datetime import datetime, timezone
from pathlib import Path


def command_line(argv: list[str], prog: str = "conv-core") -> str:
    """The command that reproduces a run: the ``CONV_CORE_*`` variables set, then ``prog`` and its arguments."""
    env = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items()) if k.startswith("CONV_CORE_")]
    return " ".join([*env, prog, *(shlex.quote(a) for a in argv)])


def stamp(record: dict, command: str | None) -> dict:
    """Add the date, the machine and versions (``conv-core info``'s data) and the command to ``record``."""
    from conv_core.engine import get_engine
    from conv_core.machine import gather_info

    record["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record["command"] = command
    record["environment"] = gather_info()
    record["backends"] = get_engine().versions()
    return record


def finite(value: float | None) -> float | None:
    """``value`` if it is a finite number, else None (JSON has no NaN or infinity)."""
    return value if value is not None and math.isfinite(value) else None


def write(record: dict, path: str | Path) -> None:
    """The record as indented JSON at ``path`` (``-``: standard output)."""
    text = json.dumps(record, indent=1, default=str) + "\n"
    if str(path) == "-":
        print(text, end="")
    else:
        Path(path).write_text(text)


def read(path: str | Path) -> dict:
    """A record written by :func:`write`; a ``ValueError`` naming the file if it is not one."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read benchmark record {path}: {exc}") from None
    if not isinstance(record, dict) or "kind" not in record:
        raise ValueError(f"{path} is not a benchmark record of conv-core bench (no 'kind')")
    return record
