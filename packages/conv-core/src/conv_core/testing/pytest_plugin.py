"""The conformance kit's pytest side: :class:`ConformanceSuite` and its parametrization.

The ``pytest11`` entry point is the tiny top-level module ``conv_core_pytest``
(so that pytest runs without conv-core's imports); it calls
:func:`generate_tests` here for classes carrying the suite marker.

A backend package checks itself with a few lines::

    from conv_core.testing import ConformanceSuite

    class TestMyBackend(ConformanceSuite):
        backend = "mybackend"
        device = "cpu"                      # or "cuda"
        dtypes = ("float16", "float32")
        layouts = ("channels_first", "channels_last")
        directions = ("fwd", "bwd_data", "bwd_weight")
        random_count = 20
        max_macs = 200_000

At collection time the suite asks the backend (and only it) for candidates for
the edge-case and random problems, and :func:`generate_tests` turns
every (problem, candidate) pair it returns into one ``test_matches_reference``.

The checks are imported inside the functions that use them, on purpose: a test module imports this
one to subclass :class:`ConformanceSuite`, and nothing of the checks (nor the engine they create)
should load before a suite is collected (``test_conformance_aten.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from ..arch import device_arch
from ..problem import ConvProblem


class ConformanceSuite:
    """Base class of a backend's conformance tests; set the attributes, inherit the tests.

    ``backend``: the backend's name; ``device``: where its kernels run;
    ``dtypes``/``layouts``/``directions``: what it claims to support (each
    must get at least one candidate, or ``test_coverage`` fails);
    ``random_count``: random problems added to the edge cases (spread
    round-robin over direction x dtype x layout); ``max_macs``: size bound of
    the random problems; ``seed``: of the random problems and operands;
    ``edge_cases``: include :func:`conv_core.testing.edge_problems`;
    ``extra_problems``: more problems (``ConvProblem`` or key strings), e.g. the
    shapes a kernel specialises in; ``cpu_threads``: torch's CPU thread count
    while the class runs (1: the problems are tiny, so more threads only add
    synchronisation, which costs dearly on a loaded machine; None: leave it).
    """

    _conv_core_conformance_suite = True  # the marker conv_core_pytest looks for

    backend: str | None = None
    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    layouts: tuple[str, ...] = ("channels_first", "channels_last")
    directions: tuple[str, ...] = ("fwd", "bwd_data", "bwd_weight")
    random_count: int = 20
    max_macs: int = 100_000
    seed: int = 0
    edge_cases: bool = True
    extra_problems: tuple = ()
    cpu_threads: int | None = 1

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _conv_core_cpu_threads(cls):
        """Run the class with ``cpu_threads`` CPU threads, and restore the count afterwards."""
        if cls.cpu_threads is None or torch.device(cls.device).type != "cpu":
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(cls.cpu_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def test_matches_reference(self, conv_case):
        """One candidate on one problem: poisoned ``out=``, fresh result, both against the reference."""
        from .checks import check_candidate

        comparison = check_candidate(_present(conv_case).problem, conv_case.candidate, self.device, self.seed)
        if not comparison.ok:
            pytest.fail(comparison.message, pytrace=False)

    def test_noncontiguous_input(self, conv_noncontiguous_problem):
        """The public ``conv_core.convNd(..., backend=...)`` on strided views, per direction x dtype x layout."""
        from .noncontiguous import check_noncontiguous

        problem = _present(conv_noncontiguous_problem)
        comparison = check_noncontiguous(problem, self.backend, self.device, self.seed)
        if not comparison.ok:
            pytest.fail(comparison.message, pytrace=False)

    def test_metadata(self, conv_kernel):
        """One kernel id: stable across calls of the hook, string tags, finite positive estimates."""
        from .checks import check_metadata

        kernel_id, pairs = _present(conv_kernel)
        issues = [issue for problem, candidate in pairs for issue in check_metadata(problem, candidate, self.device)]
        if issues:
            pytest.fail(f"{len(issues)} metadata problems of {kernel_id}:\n" + "\n".join(issues[:20]),
                        pytrace=False)

    def test_coverage(self):
        """Fails when the backend returned no candidate for a declared direction, dtype or layout.

        A suite that checks nothing must fail, never pass quietly.
        """
        found = collected(type(self))
        if found.issues:
            pytest.fail("\n".join(found.issues), pytrace=False)


# ---- what a suite class checks, gathered once per class at collection time ------------------------


@dataclass(frozen=True)
class _Nothing:
    """Stands in for the parameters of a test that has nothing to check, so that it fails with ``why``."""

    why: str


def _present(param):
    if isinstance(param, _Nothing):
        pytest.fail(param.why, pytrace=False)
    return param


@dataclass
class SuiteCases:
    """The cases of one suite class, or why there are none."""

    cases: list = field(default_factory=list)  # list[conformance.Case]
    noncontiguous: list = field(default_factory=list)  # list[ConvProblem]
    kernels: dict = field(default_factory=dict)  # kernel id -> [(problem, candidate)]
    issues: list[str] = field(default_factory=list)  # coverage issues and errors; empty: fine


_COLLECTED: dict[type, SuiteCases] = {}


def collected(cls: type) -> SuiteCases:
    """The cases of suite class ``cls`` (asked from its backend on first use, then cached)."""
    if cls not in _COLLECTED:
        try:
            _COLLECTED[cls] = _collect(cls)
        except Exception as exc:  # reported by every test of the class, not as a collection crash
            _COLLECTED[cls] = SuiteCases(issues=[f"collecting the cases of {cls.__name__} failed: "
                                                 f"{type(exc).__name__}: {exc}"])
    return _COLLECTED[cls]


def _collect(cls: type) -> SuiteCases:
    from . import conformance

    if not cls.backend:
        return SuiteCases(issues=[f"{cls.__name__} does not set `backend`, the name of the backend to check"])
    device = torch.device(cls.device)
    problems = conformance.conformance_problems(
        device_arch(device), seed=cls.seed, random_count=cls.random_count, dtypes=cls.dtypes, layouts=cls.layouts,
        directions=cls.directions, max_macs=cls.max_macs, edge=cls.edge_cases)
    problems += [p if isinstance(p, ConvProblem) else ConvProblem.from_key(p) for p in cls.extra_problems]
    collection = conformance.collect(cls.backend, device, dict.fromkeys(problems))
    found = SuiteCases(
        cases=[conformance.Case(p, c.kernel_id, c) for p, c in collection.cases],
        noncontiguous=conformance.noncontiguous_problems(collection.cases),
        issues=conformance.coverage_issues(collection, cls.directions, cls.dtypes, cls.layouts),
    )
    for problem, candidate in collection.cases:
        found.kernels.setdefault(candidate.kernel_id, []).append((problem, candidate))
    return found


def _params(values: list, ids, found: SuiteCases) -> tuple[list, list[str]]:
    """``values`` and their ids, or one failing stand-in when there are none."""
    if values:
        return values, [ids(v) for v in values]
    why = "; ".join(found.issues) or "the backend returned no candidate"
    return [_Nothing(f"nothing to check: {why}")], ["nothing-to-check"]


def generate_tests(metafunc) -> None:
    """Parametrize a :class:`ConformanceSuite`'s tests over what its backend returned."""
    cls = metafunc.cls
    if cls is None or not issubclass(cls, ConformanceSuite):
        return
    wanted = {"conv_case", "conv_noncontiguous_problem", "conv_kernel"} & set(metafunc.fixturenames)
    if not wanted:
        return
    from .conformance import short_key

    found = collected(cls)
    ids_of = {"conv_case": lambda case: case.id, "conv_noncontiguous_problem": short_key,
              "conv_kernel": lambda item: item[0].replace(":", ".")}
    values_of = {"conv_case": found.cases, "conv_noncontiguous_problem": found.noncontiguous,
                 "conv_kernel": list(found.kernels.items())}
    for name in sorted(wanted):
        values, ids = _params(values_of[name], ids_of[name], found)
        metafunc.parametrize(name, values, ids=ids)
