"""conv_core.testing.snapshot: what a candidate snapshot records, the same in every process."""

import dataclasses
import json

import torch

from conv_core.backends import aten
from conv_core.problem import ConvProblem
from conv_core.testing.snapshot import canonical, differences, write


def kernel(x):
    return x


class Launcher:
    """An object whose repr names a memory address."""


@dataclasses.dataclass(frozen=True)
class Step:
    kernel: object
    grid: tuple
    values: dict
    scale: float
    launcher: object


def test_canonical_names_functions_rounds_floats_and_drops_addresses():
    step = Step(kernel, (4, 1), {"B": 2, "A": torch.bfloat16}, 1 / 3, Launcher())
    assert canonical(step) == {"Step": {"kernel": f"<{__name__}.kernel>", "grid": [4, 1],
                                        "values": {"A": "torch.bfloat16", "B": 2}, "scale": 0.333333,
                                        "launcher": "<Launcher>"}}


def test_a_snapshot_reads_back_equal_and_tells_what_changed(tmp_path):
    key = ConvProblem("fwd", 2, 4, 8, (6, 6), (3, 3), 1, 1, 1, dtype="float32").key
    path = tmp_path / "snapshot.json"
    write(path, aten.conv_core_candidates, [key], "test")
    assert json.loads(path.read_text())["answers"][key][0]["id"] == "aten:native:default"
    assert differences(path, aten.conv_core_candidates) == []

    def slower(problem, device):
        return [dataclasses.replace(c, estimate_us=c.estimate_us * 2)
                for c in aten.conv_core_candidates(problem, device)]

    (changed,) = differences(path, slower)
    assert changed.startswith(key) and "estimate_us" in changed
