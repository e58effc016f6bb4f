"""What the shipped tables pick on the layers of benchmark runs, and how those picks did in each run (no GPU).

Every layer of the bench JSON files is ranked as the engine would rank it on the GPU they ran on (the
installed backends' candidates for a CUDA device, the tables shipped in the installed packages); the
pick's time is then looked up in each run beside aten's. A table folded from runs is checked against
those runs' own measurements this way; an independent GPU run is still what validates it.

With ``estimates`` the tables are left out: every candidate ranks on its own estimate, as on an
architecture or a layer no table covers, which says how good the estimates are on their own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def rows_of(run: Path) -> dict[str, dict]:
    """The bench rows of one run (a folder of ``*_*_*.json`` files), by problem key."""
    return {row["problem"]: row for path in sorted(Path(run).glob("*_*_*.json"))
            for row in json.loads(path.read_text())["rows"]}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


@dataclass
class Replay:
    """How the picks did: per layer the worst run's speedup over aten, and the first run's pick / fastest."""

    runs: int
    worst: list[float] = field(default_factory=list)
    same: list[int] = field(default_factory=list)
    over_fastest: list[float] = field(default_factory=list)
    slower: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        known = [r for r in self.worst if not math.isnan(r)]
        return [f"{len(self.worst)} layers; the pick's worst run vs aten: geomean {_geomean(known):.3f}, "
                f"min {min(known, default=float('nan')):.3f}; more than 5% slower than aten in some run: "
                f"{len(self.slower)}; pick not measured: {len(self.worst) - len(known)}; "
                f"the same pick as each run made: {self.same}",
                f"in the first run the pick was the fastest measured candidate on {self.over_fastest.count(1.0)} "
                f"of {len(self.over_fastest)} layers; geomean time pick / fastest {_geomean(self.over_fastest):.3f}",
                *self.slower]


def score(measured: list[dict[str, dict]], pick: Callable[[str], str]) -> Replay:
    """The picks ``pick(problem key) -> kernel id`` scored against each run's measurements (the layers of the
    first run; a later run that did not time a layer is left out for it)."""
    result = Replay(len(measured), same=[0] * len(measured))
    for key in measured[0]:
        chosen = pick(key)
        ratios = []
        for i, rows in enumerate(measured):
            if key not in rows:
                continue
            result.same[i] += rows[key]["picked"] == chosen
            times = {m["kernel"]: m["us"] for m in rows[key]["measurements"] if m["us"]}
            ratios.append(rows[key]["aten_us"] / times[chosen] if chosen in times else float("nan"))
            if i == 0 and chosen in times:
                result.over_fastest.append(times[chosen] / min(times.values()))
        result.worst.append(min(ratios))
        if min(ratios) < 0.95:
            row = measured[0][key]
            result.slower.append(f"{row['layer']} {key.split()[0]} {key.split()[-3]}: {chosen} {ratios}")
    return result


def engine_picks(runs: list[Path], estimates: bool = False) -> Callable[[str], str]:
    """What the engine ranks first on a problem key, on the runs' GPU, with the shipped tables (or none)."""
    import torch
    from conv_core.engine import get_engine
    from conv_core.problem import ConvProblem
    from conv_core.ranking import rank
    from conv_core.tuning import Timings

    engine = get_engine()
    data = json.loads(next(Path(runs[0]).glob("*_*_*.json")).read_text())
    timings = Timings(data["device_name"], data["arch"], engine.versions(), Path("/nonexistent"),
                      () if estimates else engine.registry.tuning_tables())
    device = torch.device("cuda")  # the hooks read the device type only

    def pick(key: str) -> str:
        problem = ConvProblem.from_key(key)
        candidates, declined = engine.registry.candidates(problem, device)
        return rank(problem, candidates, declined, timings).best.kernel_id

    return pick


def replay(runs: list[Path], estimates: bool = False) -> Replay:
    """The engine's picks on the runs' layers, scored against each run."""
    return score([rows_of(run) for run in runs], engine_picks(runs, estimates))
