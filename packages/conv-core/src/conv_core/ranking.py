"""Ordering one problem's candidates.

Each candidate gets one expected time, from the best source there is:

1. ``tuning-db``: measured on this device by ``conv-core tune`` (same backend version);
2. ``table:<backend>``: measured by a backend's authors on this architecture, shipped as data;
3. ``benchmark``: timed on first use, only when the user turned that on;
4. ``estimate``: the candidate's own prediction.

Candidates are then ordered by (experimental last, non-deterministic last,
time, kernel id), so the same problem on the same machine always picks the
same kernel. A candidate measured as ``broken`` is never ranked.

Non-deterministic candidates (tagged ``atomics``) are excluded while
``torch.use_deterministic_algorithms`` is on; otherwise they come after every
candidate without that tag, unless ``CONV_CORE_NONDETERMINISTIC=1`` ranks them by time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .candidate import Candidate, Declined
from .problem import ConvProblem
from .tuning import Timings


@dataclass(frozen=True)
class Ranked:
    """A candidate with the time the ranking used and where that time came from."""

    candidate: Candidate
    us: float
    source: str

    @property
    def kernel_id(self) -> str:
        return self.candidate.kernel_id


@dataclass
class Ranking:
    """The ordered candidates of one problem, with everything ``explain`` reports."""

    problem: ConvProblem
    ranked: list[Ranked]
    declined: list[Declined] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)

    @property
    def best(self) -> Ranked:
        return self.ranked[0]


def nondeterministic(candidate: Candidate) -> bool:
    """Whether ``candidate`` may give different bits between runs (it accumulates with atomics)."""
    return "atomics" in candidate.tags


def rank(problem: ConvProblem, candidates: list[Candidate], declined: list[Declined], timings: Timings,
         benchmarked: dict[str, float] | None = None, *, allow_nondeterministic: bool = False,
         deterministic_mode: bool = False) -> Ranking:
    """Order ``candidates`` for ``problem``; see the module docstring for the rules.

    ``allow_nondeterministic``: the ``CONV_CORE_NONDETERMINISTIC`` setting;
    ``deterministic_mode``: ``torch.are_deterministic_algorithms_enabled()``.
    """
    ranked: list[Ranked] = []
    excluded: list[tuple[str, str]] = []
    for c in candidates:
        if deterministic_mode and nondeterministic(c):
            excluded.append((c.kernel_id, "non-deterministic (atomics) while torch.use_deterministic_algorithms is on"))
            continue
        measured = timings.get(problem.key, c.kernel_id)
        if measured is not None and measured.status != "ok":
            excluded.append((c.kernel_id, f"measured as {measured.status} ({measured.source})"))
        elif measured is not None:
            ranked.append(Ranked(c, measured.us, measured.source))
        elif benchmarked and c.kernel_id in benchmarked:
            ranked.append(Ranked(c, benchmarked[c.kernel_id], "benchmark"))
        else:
            ranked.append(Ranked(c, c.estimate_us, "estimate"))
    ranked.sort(key=lambda r: ("experimental" in r.candidate.tags,
                               not allow_nondeterministic and nondeterministic(r.candidate), r.us, r.kernel_id))
    return Ranking(problem, ranked, list(declined), excluded)
