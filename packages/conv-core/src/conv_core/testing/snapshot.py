"""A backend's candidates for fixed problems, written down so that a refactoring can show it changed none of them.

For each problem of a snapshot file (problem keys, the architecture in each), the backend's hook is asked for
its candidates on a GPU device of the key's kind (no GPU needed: the hooks read the device's type, the problem
carries the architecture) and each candidate is recorded as its id, estimate (6 significant digits), tags,
workspace, error factor and a digest of its plan (every launch's kernel, grid, arguments and options, read
from the plan's fields). A decline is recorded with its reason. A plugin's test compares what its hook answers
now with its committed snapshots (:func:`snapshot_test`); ``python -m conv_core.testing.snapshot`` writes one.
A change meant to alter the candidates writes the snapshot again (under ``TRITON_INTERPRET=1`` where the
plugin's tests run so: a plan may read it) and says why in its commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..candidate import Candidate, Declined
from ..problem import ConvProblem

FORMAT = "conv-core-candidates/1"


def canonical(value):
    """``value`` as plain JSON data that is the same in every process: dataclasses by field, functions and kernels
    by qualified name (a Triton kernel by its Python function's, run compiled or interpreted), floats to 6
    significant digits, other objects by their ``repr`` unless it names a memory address."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {type(value).__name__: {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, dict):
        return {str(canonical(k)): canonical(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple, frozenset, set)):
        items = [canonical(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (frozenset, set)) else items
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}")
    function = getattr(value, "fn", value)  # a Triton kernel, compiled or interpreted: its Python function
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    if name is not None:
        return f"<{getattr(function, '__module__', '')}.{name}>"
    text = repr(value)
    return f"<{type(value).__name__}>" if " at 0x" in text else text


def record(item: Candidate | Declined) -> dict:
    """One answer of a hook, as a snapshot keeps it."""
    if isinstance(item, Declined):
        return {"declined": item.reason}
    plan = getattr(item.run, "plan", None)
    digest = hashlib.sha256(json.dumps(canonical(plan), sort_keys=True).encode()).hexdigest()[:16]
    return {"id": item.kernel_id, "estimate_us": float(f"{item.estimate_us:.6g}"), "tags": sorted(item.tags),
            "workspace_bytes": item.workspace_bytes, "error_factor": float(f"{item.error_factor:.6g}"),
            "plan": digest if plan is not None else None}


def answers(candidates: Callable[[ConvProblem, torch.device], Sequence], keys: Sequence[str]) -> dict[str, list]:
    """Problem key -> the records of what ``candidates`` (a backend's candidates function) answers for it."""
    device = torch.device("cuda")  # only the type is read: the key carries the architecture
    return {key: [record(item) for item in candidates(ConvProblem.from_key(key), device)] for key in keys}


def differences(path: Path, candidates: Callable) -> list[str]:
    """How ``candidates`` now differs from the snapshot at ``path`` (empty: it answers the same, record by record)."""
    snapshot = json.loads(Path(path).read_text())
    now = answers(candidates, list(snapshot["answers"]))
    return [f"{key}:\n  was {was}\n  now {now[key]}" for key, was in snapshot["answers"].items() if now[key] != was]


def snapshot_test(candidates: Callable, folder: Path, archs: Sequence[str]) -> Callable:
    """A plugin's test, parametrized by architecture: ``candidates`` answers what ``folder/candidates_<arch>.json``
    recorded, problem by problem."""
    import pytest

    @pytest.mark.parametrize("arch", archs)
    def test_the_candidates_are_the_snapshots(arch):
        assert differences(Path(folder) / f"candidates_{arch}.json", candidates) == []

    return test_the_candidates_are_the_snapshots


def write(path: Path, candidates: Callable, keys: Sequence[str], source: str) -> None:
    """The snapshot of ``candidates`` on ``keys``: JSON with one line per problem (a diff names the problem)."""
    lines = [f"  {json.dumps(key)}: {json.dumps(records, sort_keys=True)}" for key, records in
             answers(candidates, keys).items()]
    head = f'{{"format": {json.dumps(FORMAT)}, "source": {json.dumps(source)}, "answers": {{\n'
    Path(path).write_text(head + ",\n".join(lines) + "\n}}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conv_core.testing.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("candidates", help="the backend's candidates function, module:name (conv_rdna.candidates:"
                        "candidates)")
    parser.add_argument("keys", help="a file of problem keys, one per line")
    parser.add_argument("--out", required=True)
    parser.add_argument("--source", default="", help="what the snapshot was taken from (a commit)")
    args = parser.parse_args(argv)
    module, _, name = args.candidates.partition(":")
    keys = [line.strip() for line in Path(args.keys).read_text().splitlines() if line.strip()]
    write(Path(args.out), getattr(importlib.import_module(module), name), keys, args.source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
