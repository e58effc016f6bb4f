"""Conformance checks of a backend's candidates, in plain Python (no pytest needed).

The checks live in :mod:`~conv_core.testing.checks` (one candidate: the
reference, its metadata) and :mod:`~conv_core.testing.noncontiguous` (the
public API on strided views); this module asks the backend, checks coverage
and runs them all. Each check returns a :class:`~conv_core.reference.Comparison`
(or a list of problems found) instead of raising, so that ``conv-core check`` can run them
all and print a report, and :class:`conv_core.testing.ConformanceSuite` can
turn each into one pytest test.

What a candidate must do (the contract of :class:`conv_core.Candidate`):

- compute the result of its problem within the tolerance of
  :func:`conv_core.reference.tolerance`;
- given ``out``, write *every* element of it and return that very tensor
  (``out`` is filled with NaN beforehand, so an element left alone fails);
- without ``out``, return a new tensor of the result's shape and dtype, dense
  in the problem's layout;
- leave its operands unchanged, and, if tagged ``deterministic``, give the
  same bits twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ..arch import device_arch
from ..candidate import Candidate, Declined
from ..engine import get_engine
from ..problem import DIRECTIONS, DTYPES, LAYOUTS, ConvProblem
from ..reference import Comparison
from . import cases as _cases
from .checks import check_candidate, check_metadata, failed, poisoned_result
from .noncontiguous import (check_noncontiguous, noncontiguous_operands, noncontiguous_problems,
                            pick_noncontiguous_problem, scattered_copy)

#: Importable from here, where they were defined before the split into checks and noncontiguous.
__all__ = ["DEFAULT_DTYPES", "Case", "CheckResult", "Collection", "Report", "backend_problem", "check_candidate",
           "check_metadata", "check_noncontiguous", "collect", "collect_cases", "conformance_problems",
           "coverage_issues", "failed", "noncontiguous_operands", "noncontiguous_problems",
           "pick_noncontiguous_problem", "poisoned_result", "run_conformance", "scattered_copy", "short_key"]

#: Dtypes a conformance run covers unless told otherwise.
DEFAULT_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Case:
    """One (problem, kernel) pair to check; ``candidate`` is the object the backend returned."""

    problem: ConvProblem
    kernel_id: str
    candidate: Candidate | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        """A short readable id: the kernel id (``:`` as ``.``) and the abbreviated problem key."""
        return f"{self.kernel_id.replace(':', '.')}-{short_key(self.problem)}"


def short_key(problem: ConvProblem) -> str:
    """``problem.key`` without its defaults, joined by ``-``: ``fwd-n2c4k4-i8x8-f3x3-s2-p1-f16-cl-bias-relu``."""
    def dims(values) -> str:
        return "x".join(str(v) for v in values)

    def same(values) -> bool:
        return len(set(values)) == 1

    parts = [problem.direction, f"n{problem.batch}c{problem.in_channels}k{problem.out_channels}"]
    if problem.groups > 1:
        parts[-1] += f"g{problem.groups}"
    parts += [f"i{dims(problem.input_size)}", f"f{dims(problem.filter_size)}"]
    if any(s != 1 for s in problem.stride):
        parts.append(f"s{problem.stride[0] if same(problem.stride) else dims(problem.stride)}")
    pads = [v for pair in problem.padding for v in pair]
    if any(pads):
        parts.append(f"p{pads[0]}" if same(pads) else "p" + "x".join(f"{a}.{b}" for a, b in problem.padding))
    if any(d != 1 for d in problem.dilation):
        parts.append(f"d{problem.dilation[0] if same(problem.dilation) else dims(problem.dilation)}")
    dtypes = [DTYPES[d] for d in (problem.dtype, problem.weight_dtype, problem.out_dtype)]
    parts.append(dtypes[0] if same(dtypes) else ".".join(dtypes))
    parts.append("cl" if problem.layout == "channels_last" else "cf")
    if problem.bias:
        parts.append("bias")
    if problem.activation:
        parts.append(problem.activation)
    return "-".join(parts)


# ---- asking the backend ----------------------------------------------------------------------------


@dataclass
class Collection:
    """What one backend answered for a list of problems."""

    backend: str
    cases: list[tuple[ConvProblem, Candidate]] = field(default_factory=list)
    declined: list[tuple[ConvProblem, Declined]] = field(default_factory=list)
    #: (problem, message) for every call of the candidates hook that raised or returned something malformed.
    errors: list[tuple[ConvProblem, str]] = field(default_factory=list)


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot be checked (not installed, failed to load, filtered out), or None."""
    registry = get_engine().registry
    found = registry.get(backend)
    if found is None:
        names = ", ".join(b.name for b in registry.backends()) or "none"
        return (f"backend {backend!r} is not loaded (loaded: {names}); is its package installed with a "
                f"'conv_core.backends' entry point, and not excluded by CONV_CORE_PLUGINS/CONV_CORE_DISABLE_PLUGINS?")
    if not found.ok:
        return f"backend {backend!r} failed to load: {found.load_error}"
    return None


def collect(backend: str, device: torch.device | str, problems: Iterable[ConvProblem]) -> Collection:
    """Ask ``backend`` alone for its candidates for each problem; raise LookupError if it is not loaded."""
    why = backend_problem(backend)
    if why:
        raise LookupError(why)
    registry, device = get_engine().registry, torch.device(device)
    result = Collection(backend)
    for problem in problems:
        candidates, declined = registry.candidates(problem, device, only=backend)
        result.cases.extend((problem, c) for c in candidates)
        for d in declined:
            if d.reason.startswith("failed:"):  # the registry's record of a hook that raised
                result.errors.append((problem, d.reason))
            else:
                result.declined.append((problem, d))
    return result


def collect_cases(backend: str, device: torch.device | str,
                  problems: Iterable[ConvProblem]) -> list[tuple[ConvProblem, Candidate]]:
    """Every candidate ``backend`` returns for each problem, as (problem, candidate) pairs.

    Only that backend is asked. Raises LookupError if it is not loaded; see
    :func:`collect` for its declines and hook failures too.
    """
    return collect(backend, device, problems).cases


# ---- coverage -----------------------------------------------------------------------------------------


def coverage_issues(collection: Collection, directions: Sequence[str], dtypes: Sequence[str],
                    layouts: Sequence[str]) -> list[str]:
    """Why a run would check too little: a declared direction, dtype or layout with no candidate, hook errors.

    A suite that checks nothing must fail, never pass quietly.
    """
    issues = [f"the candidates hook failed on {p.key}: {message}" for p, message in collection.errors[:10]]
    if len(collection.errors) > 10:
        issues.append(f"... and {len(collection.errors) - 10} more hook failures")
    for what, wanted, of in (("direction", directions, lambda p: p.direction),
                             ("dtype", dtypes, lambda p: p.dtype),
                             ("layout", layouts, lambda p: p.layout)):
        seen = {of(p) for p, _ in collection.cases}
        for value in wanted:
            if value not in seen:
                reasons = sorted({d.reason for p, d in collection.declined if of(p) == value})[:3]
                issues.append(f"backend {collection.backend!r} returned no candidate for any problem with {what} "
                              f"{value!r}" + (f" (declined: {'; '.join(reasons)})" if reasons else ""))
    return issues


# ---- a whole run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """One check of a conformance run."""

    check: str  # "reference", "noncontiguous", "metadata" or "coverage"
    kernel_id: str
    problem_key: str
    ok: bool
    message: str
    comparison: Comparison | None = None


@dataclass
class Report:
    """Everything a conformance run checked, and how it went."""

    backend: str
    device: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failures

    @property
    def counts(self) -> dict[str, tuple[int, int]]:
        """Check name -> (passed, failed)."""
        counts: dict[str, list[int]] = {}
        for r in self.results:
            counts.setdefault(r.check, [0, 0])[0 if r.ok else 1] += 1
        return {name: (passed, failed) for name, (passed, failed) in counts.items()}

    def summary(self) -> str:
        """One line per check kind, then every failure."""
        lines = [f"conformance of backend {self.backend!r} on {self.device}: {'PASS' if self.ok else 'FAIL'}"]
        for name, (passed, failures) in self.counts.items():
            lines.append(f"  {name:<14} {passed:5d} passed {failures:5d} failed")
        lines += [f"  FAIL [{r.check}] {r.message}" for r in self.failures]
        return "\n".join(lines)


def conformance_problems(arch: str, *, seed: int = 0, random_count: int = 20,
                         dtypes: Sequence[str] = DEFAULT_DTYPES, layouts: Sequence[str] = LAYOUTS,
                         directions: Sequence[str] = DIRECTIONS, max_macs: int = 100_000,
                         edge: bool = True) -> list[ConvProblem]:
    """The edge cases (if ``edge``) and ``random_count`` random problems a run checks."""
    problems = _cases.edge_problems(arch, directions, dtypes, layouts) if edge else []
    problems += _cases.random_problems(seed, random_count, arch, directions, dtypes, layouts, max_macs)
    return list(dict.fromkeys(problems))


def run_conformance(backend: str, device: torch.device | str = "cpu", *, seed: int = 0, random_count: int = 20,
                    dtypes: Sequence[str] = DEFAULT_DTYPES, layouts: Sequence[str] = LAYOUTS,
                    directions: Sequence[str] = DIRECTIONS, max_macs: int = 100_000,
                    edge: bool = True) -> Report:
    """Check every candidate ``backend`` returns for the conformance problems; never raises for a bad backend.

    Runs :func:`check_candidate` per (problem, candidate), :func:`check_noncontiguous`
    per direction x dtype x layout that has a candidate, :func:`check_metadata` per
    (problem, candidate), and the coverage check of :func:`coverage_issues`.
    """
    device = torch.device(device)
    report = Report(backend, str(device))
    why = backend_problem(backend)
    if why:
        report.results.append(CheckResult("coverage", "", "", False, why))
        return report
    problems = conformance_problems(device_arch(device), seed=seed, random_count=random_count, dtypes=dtypes,
                                    layouts=layouts, directions=directions, max_macs=max_macs, edge=edge)
    collection = collect(backend, device, problems)
    for problem, candidate in collection.cases:
        comparison = check_candidate(problem, candidate, device, seed)
        report.results.append(CheckResult("reference", candidate.kernel_id, problem.key, comparison.ok,
                                          comparison.message, comparison))
        issues = check_metadata(problem, candidate, device)
        report.results.append(CheckResult("metadata", candidate.kernel_id, problem.key, not issues,
                                          "; ".join(issues) or "ok"))
    for problem in noncontiguous_problems(collection.cases):
        comparison = check_noncontiguous(problem, backend, device, seed)
        report.results.append(CheckResult("noncontiguous", backend, problem.key, comparison.ok, comparison.message,
                                          comparison))
    issues = coverage_issues(collection, directions, dtypes, layouts)
    report.results += [CheckResult("coverage", "", "", False, issue) for issue in issues]
    if not issues:
        report.results.append(CheckResult("coverage", "", "", True, f"{len(collection.cases)} cases"))
    return report
