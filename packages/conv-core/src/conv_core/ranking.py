"""Ordering one problem's candidates.

Each candidate gets one expected time, from the best source there is:

1. ``tuning-db``: measured on this device by ``conv-core tune`` (same backend version);
2. ``table:<backend>``: measured by a backend's authors on this architecture, shipped as data;
3. ``benchmark``: timed on first use, only when the user turned that on (ahead of a table's time of the
   problem without its epilogue: first use timed the problem itself);
4. ``estimate``: the candidate's own prediction.

Candidates are then ordered by (experimental last, non-deterministic last,
time, kernel id), so the same problem on the same machine always picks the
same kernel. A candidate measured as ``broken`` is never ranked.

aten (PyTorch's own convolution) is the baseline a user already has, so a
plugin candidate is ranked ahead of it only on evidence: both times measured
(not estimated) and the candidate's at least :data:`MARGIN` faster, each time counted as at least its
backend's host time per call (:data:`PLUGIN_HOST_US`, :data:`ATEN_HOST_US`). An
estimate never displaces aten. Estimates rank plugin candidates among
themselves, behind aten, where they serve as fallbacks. ``CONV_CORE_TRUST_ESTIMATES=1``
lifts that rule: every candidate is then ranked by its time, whatever its source.

Non-deterministic candidates (tagged ``atomics``) are excluded while
``torch.use_deterministic_algorithms`` is on; otherwise they come after every
candidate without that tag, unless ``CONV_CORE_NONDETERMINISTIC=1`` ranks them by time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .candidate import Candidate, Declined
from .problem import ConvProblem
from .tuning import Timing, Timings


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


#: How much faster (as a ratio of measured times) a plugin candidate must be to run instead of aten: more
#: than the spread of two timings of one kernel, so a tie in noise stays with aten.
MARGIN = 1.05

#: Host time of one call, in microseconds: through aten (F.conv*d) and through a plugin kernel (its launcher,
#: descriptors and conv-core's engine route). Measured times are GPU time, but where a model's eager run waits for
#: the host, a call costs the larger of the two: a plugin's GPU-time win that its host time eats is no win.
#: (Without this rule a converted ResNet-50's AMP training step ran 2.5x slower for GPU-time wins of a few
#: microseconds per layer.) In a loop a plugin call costs little more than F.conv2d (24 against 20 us, conv-core
#: bench --host), but inside a model, after a run of aten calls, it cost 36-80 us more on an H200's host: the
#: stems of EfficientNet-B0 and MobileNetV3-L, RetinaNet's first conv-gluon call (2026-11-29, gpu_eager_gap
#: --per-layer), and RetinaNet's eager step 1.0 ms more with 12 plugin calls (0.924x plain, same day). So a
#: plugin is counted at 80 us more than aten.
ATEN_HOST_US = 20.0
PLUGIN_HOST_US = 100.0
#: What a layer that trains through conv-core's engine route (its own Python autograd function, the plugins'
#: launches, their derived weights made again after every optimizer step) costs a training step beyond its
#: directions' times, in microseconds. Measured on an H200 (2026-11-28, bf16 channels-last, medians of 5
#: alternating rounds): the converted ConvNeXt-T trained at 0.846x plain with its 6 plugin layers and 0.956x with
#: every layer on aten, about 470 us per plugin layer; VGG-16-BN lost about 290 us per plugin layer (the
#: smaller is taken).
GRAD_ROUTE_US = 300.0
#: What a plugin layer's opaque op costs a host-bound ``torch.compile`` step (Inductor calls aten's for ATEN_HOST_US),
#: in microseconds. On an H200 (2026-11-29) the op took 206 us of its own host time a call, but a compiled ResNet-50
#: whose one plugin layer saved 86 us of GPU time lost 0.30-0.57 ms a step to it (0.83-0.91x plain, three runs).
TRACED_PLUGIN_HOST_US = 500.0

#: First use in benchmark mode times a plugin candidate only where it could win (:func:`worth_timing`): its own
#: estimate at most FIRST_USE_SLACK times aten's measured time (room for the estimate's own error), and at most
#: FIRST_USE_PER_BACKEND of them per backend, the best estimated. Each is compiled first, and compiles in threads
#: barely overlap (Triton's front end is Python): VGG-16-BN's first training step took 37.9 s against plain's 2.5 s
#: (H200, 2026-11-28); RetinaNet's first forward spent 9.3 of 12.6 s compiling two per backend of two layers.
FIRST_USE_SLACK = 2.0
FIRST_USE_PER_BACKEND = 1

#: Sources of a time that count as evidence (measured on the hardware), as opposed to ``estimate``.
MEASURED = ("tuning-db", "table:", "benchmark")

BASELINE_BACKEND = "aten"


def is_measured(source: str) -> bool:
    return source.startswith(MEASURED)


def measured_time(timings: Timings, problem: ConvProblem, kernel_id: str):
    """The measured time of ``kernel_id`` on ``problem``, or on the same problem without its epilogue.

    Tables are measured without bias and activation; a fused epilogue adds one pass over the output at
    most to every candidate (aten's more, since it applies the activation apart), so the bare problem's
    times rank a fused problem's candidates too (source marked ``(no epilogue)``).
    """
    found = timings.get(problem.key, kernel_id)
    if found is not None or not (problem.bias or problem.activation):
        return found
    bare = timings.get(problem.replace(bias=False, activation=None).key, kernel_id)
    return bare if bare is None else Timing(bare.us, bare.status, f"{bare.source}{BARE}")


BARE = " (no epilogue)"


def is_bare(timing: Timing) -> bool:
    """Whether ``timing`` is the problem's without its epilogue (:func:`measured_time`)."""
    return timing.source.endswith(BARE)


def nondeterministic(candidate: Candidate) -> bool:
    """Whether ``candidate`` may give different bits between runs (it accumulates with atomics)."""
    return "atomics" in candidate.tags


def rank(problem: ConvProblem, candidates: list[Candidate], declined: list[Declined], timings: Timings,
         benchmarked: dict[str, float] | None = None, *, allow_nondeterministic: bool = False,
         deterministic_mode: bool = False, trust_estimates: bool = False) -> Ranking:
    """Order ``candidates`` for ``problem``; see the module docstring for the rules.

    ``allow_nondeterministic``: the ``CONV_CORE_NONDETERMINISTIC`` setting;
    ``deterministic_mode``: ``torch.are_deterministic_algorithms_enabled()``;
    ``trust_estimates``: the ``CONV_CORE_TRUST_ESTIMATES`` setting.
    """
    ranked: list[Ranked] = []
    excluded: list[tuple[str, str]] = []
    for c in candidates:
        if deterministic_mode and nondeterministic(c):
            excluded.append((c.kernel_id, "non-deterministic (atomics) while torch.use_deterministic_algorithms is on"))
            continue
        measured = measured_time(timings, problem, c.kernel_id)
        if benchmarked and c.kernel_id in benchmarked and (measured is None or is_bare(measured)):
            ranked.append(Ranked(c, benchmarked[c.kernel_id], "benchmark"))  # this very problem, epilogue and all
        elif measured is not None and measured.status != "ok":
            excluded.append((c.kernel_id, f"measured as {measured.status} ({measured.source})"))
        elif measured is not None:
            ranked.append(Ranked(c, measured.us, measured.source))
        else:
            ranked.append(Ranked(c, c.estimate_us, "estimate"))

    def demoted(r: Ranked) -> bool:
        return "experimental" in r.candidate.tags or (not allow_nondeterministic and nondeterministic(r.candidate))

    ranked.sort(key=lambda r: (demoted(r), r.us, r.kernel_id))
    if not trust_estimates:
        ranked = baseline_first(ranked, demoted)
    return Ranking(problem, ranked, list(declined), excluded)


def baseline_first(ranked: list[Ranked], demoted=lambda r: False) -> list[Ranked]:
    """``ranked`` with aten moved ahead of every candidate that has no evidence of beating it by MARGIN.

    Candidates that keep their place ahead of aten are those measured at least MARGIN faster than aten's
    measured time (and not ``demoted``: experimental, or non-deterministic where that ranks last); the
    order among the others is unchanged.
    """
    baseline = next((r for r in ranked if r.candidate.backend == BASELINE_BACKEND), None)
    if baseline is None:
        return ranked
    aten_measured = is_measured(baseline.source)

    def proven(r: Ranked) -> bool:
        faster = max(r.us, PLUGIN_HOST_US) * MARGIN <= max(baseline.us, ATEN_HOST_US)
        return aten_measured and not demoted(r) and is_measured(r.source) and faster

    ahead = [r for r in ranked if r is not baseline and proven(r)]
    behind = [r for r in ranked if r is not baseline and not any(r is a for a in ahead)]
    return ahead + [baseline] + behind


def worth_timing(candidates: list[Candidate], aten_us: float | None) -> list[Candidate]:
    """The plugin ``candidates`` that first-use timing times, given aten's time (None where aten has none).

    Nothing where aten takes less than a plugin's host time per call (with the margin): no plugin can earn its
    place ahead of it (:func:`baseline_first`). Otherwise, by backend, the :data:`FIRST_USE_PER_BACKEND` best
    estimated candidates whose estimate is within :data:`FIRST_USE_SLACK` of aten's time, best estimate first
    (ties by kernel id, so the same problem always times the same candidates), never an ``experimental`` one (it
    ranks behind aten whatever its time: timing it would only cost its compilation).
    """
    if aten_us is not None and aten_us < PLUGIN_HOST_US * MARGIN:
        return []
    chosen: list[Candidate] = []
    per_backend: dict[str, int] = {}
    for c in sorted(candidates, key=lambda c: (c.estimate_us, c.kernel_id)):
        if aten_us is not None and c.estimate_us > aten_us * FIRST_USE_SLACK:
            break
        if "experimental" not in c.tags and per_backend.get(c.backend, 0) < FIRST_USE_PER_BACKEND:
            per_backend[c.backend] = per_backend.get(c.backend, 0) + 1
            chosen.append(c)
    return chosen
