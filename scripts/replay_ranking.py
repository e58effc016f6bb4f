"""What the shipped tables pick on the layers of benchmark runs, and how those picks did in each run (no GPU).

Ranks every layer of the bench JSON files as the engine would on the GPU they ran on (the installed backends'
candidates for a CUDA device, the tables shipped in the installed packages), then looks the pick's time up
in each run beside aten's. A table folded from runs is checked against those runs' own measurements this
way; an independent GPU run is still what validates it.

The layers are those of the first run; a later run that did not time a layer is left out for it.

With ``--estimates`` the tables are left out: every candidate ranks on its own estimate, as on an architecture or a
layer no table covers. That is how good the estimates are on their own (issue 3 asks how often the first choice is
the fastest measured candidate, and the geomean time chosen / fastest).

Usage: python3 scripts/replay_ranking.py [--estimates] RUN_DIR...   (each a folder of one bench run's *_*_*.json)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from conv_core.engine import get_engine
from conv_core.problem import ConvProblem
from conv_core.ranking import rank
from conv_core.tuning import Timings

DEVICE = torch.device("cuda")  # the hooks read the device type only


def rows_of(run: Path) -> dict[str, dict]:
    return {row["problem"]: row for path in sorted(run.glob("*_*_*.json"))
            for row in json.loads(path.read_text())["rows"]}


def main(runs: list[Path], estimates: bool = False) -> int:
    engine = get_engine()
    measured = [rows_of(run) for run in runs]
    first = next(iter(measured[0].values()))
    device_name = json.loads(next(runs[0].glob("*_*_*.json")).read_text())["device_name"]
    timings = Timings(device_name, first["problem"].rsplit(" ", 1)[1], engine.versions(), Path("/nonexistent"),
                      () if estimates else engine.registry.tuning_tables())
    worst, slower, same, over_fastest = [], [], [0] * len(runs), []
    for key in measured[0]:
        problem = ConvProblem.from_key(key)
        candidates, declined = engine.registry.candidates(problem, DEVICE)
        pick = rank(problem, candidates, declined, timings).best.kernel_id
        ratios = []
        for i, rows in enumerate(measured):
            if key not in rows:
                continue
            same[i] += rows[key]["picked"] == pick
            times = {m["kernel"]: m["us"] for m in rows[key]["measurements"] if m["us"]}
            ratios.append(rows[key]["aten_us"] / times[pick] if pick in times else float("nan"))
            if i == 0 and pick in times:
                over_fastest.append(times[pick] / min(times.values()))
        worst.append(min(ratios))
        if min(ratios) < 0.95:
            slower.append(f"{rows[key]['layer']} {problem.direction} {problem.layout}: {pick} {ratios}")
    known = [r for r in worst if not math.isnan(r)]
    print(f"{len(worst)} layers; the pick's worst run vs aten: geomean "
          f"{math.exp(sum(map(math.log, known)) / len(known)):.3f}, min {min(known):.3f}; "
          f"more than 5% slower than aten in some run: {len(slower)}; pick not measured: {len(worst) - len(known)}; "
          f"the same pick as each run made: {same}")
    print(f"in the first run the pick was the fastest measured candidate on {over_fastest.count(1.0)} of "
          f"{len(over_fastest)} layers; geomean time pick / fastest "
          f"{math.exp(sum(map(math.log, over_fastest)) / len(over_fastest)):.3f}")
    print("\n".join(slower))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    raise SystemExit(main([Path(p) for p in args if p != "--estimates"], estimates="--estimates" in args))
