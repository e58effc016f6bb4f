"""Conformance checks of a backend's candidates, in plain Python (no pytest needed).

Each check returns a :class:`~conv_core.reference.Comparison` (or a list of
problems found) instead of raising, so that ``conv-core check`` can run them
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

import math
import numbers
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ..candidate import Candidate, Declined
from ..problem import DIRECTIONS, DTYPES, LAYOUTS, ConvProblem, torch_dtype
from ..layout import empty_strided_for, is_dense_in, layout_order
from ..reference import Comparison, compare, random_operands
from . import cases as _cases

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


def _registry():
    from ..engine import get_engine

    return get_engine().registry


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot be checked (not installed, failed to load, filtered out), or None."""
    registry = _registry()
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
    registry, device = _registry(), torch.device(device)
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


# ---- checking one candidate -----------------------------------------------------------------------


def failed(problem: ConvProblem, candidate: Candidate | None, message: str) -> Comparison:
    """A failed Comparison whose message names the kernel and the problem."""
    who = f"{candidate.kernel_id} on " if candidate is not None else ""
    return Comparison(False, math.inf, math.inf, -1, 0, f"{who}{problem.key}: {message}")


def _with_kernel(result: Comparison, candidate: Candidate, what: str) -> Comparison:
    """``result`` with the kernel id and the kind of call prefixed to its message."""
    return Comparison(result.ok, result.worst_ratio, result.relative_l2, result.bad_elements, result.nan_elements,
                      f"{candidate.kernel_id} ({what}) on {result.message}")


def poisoned_result(problem: ConvProblem, device: torch.device | str) -> torch.Tensor:
    """``problem.empty_result`` filled with NaN: any element a kernel forgets to write stays NaN and fails."""
    return problem.empty_result(device).fill_(math.nan)


def _result_issue(problem: ConvProblem, result: object) -> str | None:
    """What is wrong with the form (type, shape, dtype, layout) of a result, or None."""
    if not isinstance(result, torch.Tensor):
        return f"run returned {type(result).__name__}, not a tensor"
    if tuple(result.shape) != problem.result_shape:
        return f"result shape {tuple(result.shape)} != {problem.result_shape}"
    if result.dtype != torch_dtype(problem.result_dtype):
        return f"result dtype {result.dtype} != {problem.result_dtype}"
    if not is_dense_in(result, problem.layout):
        return f"result with strides {result.stride()} is not dense in {problem.layout}"
    return None


def _changed_operand(originals: tuple, operands: tuple) -> str | None:
    """The name of the first operand that differs from its copy taken before the run, or None."""
    for name, before, after in zip(("first", "second", "bias"), originals, operands):
        if before is not None and not torch.equal(before, after):
            return name
    return None


def check_candidate(problem: ConvProblem, candidate: Candidate, device: torch.device | str,
                    seed: int = 0) -> Comparison:
    """Run ``candidate`` with a poisoned ``out`` and without ``out``; both results must match the reference.

    Also checks that ``run(out=out)`` returns ``out`` itself (same storage and
    strides), that ``run()`` returns a dense tensor of the right shape and
    dtype, that the operands are left unchanged, and that a ``deterministic``
    candidate gives the same bits both times. Any exception becomes a failure.
    """
    try:
        return _check_candidate(problem, candidate, device, seed)
    except Exception as exc:  # a kernel that raises fails its case, it does not stop the run
        return failed(problem, candidate, f"raised {type(exc).__name__}: {exc}")


def _check_candidate(problem: ConvProblem, candidate: Candidate, device, seed: int) -> Comparison:
    operands = random_operands(problem, device, seed)
    originals = tuple(None if t is None else t.clone() for t in operands)

    out = poisoned_result(problem, device)
    pointer, strides = out.data_ptr(), out.stride()
    returned = candidate.run(*operands, out=out)
    if returned is not out:
        return failed(problem, candidate, "run(..., out=out) did not return out itself")
    if out.data_ptr() != pointer or out.stride() != strides:
        return failed(problem, candidate, "run(..., out=out) replaced out's storage or strides")
    changed = _changed_operand(originals, operands)
    if changed:
        return failed(problem, candidate, f"run modified its {changed} operand")
    with_out = _with_kernel(compare(problem, out, operands, candidate), candidate, "out=poisoned")
    if not with_out.ok:
        return with_out

    fresh = candidate.run(*operands)
    issue = _result_issue(problem, fresh)
    if issue:
        return failed(problem, candidate, f"run(...) without out: {issue}")
    without_out = _with_kernel(compare(problem, fresh, operands, candidate), candidate, "out=None")
    if not without_out.ok:
        return without_out

    changed = _changed_operand(originals, operands)
    if changed:
        return failed(problem, candidate, f"run modified its {changed} operand")
    if "deterministic" in candidate.tags and not torch.equal(out, fresh):
        return failed(problem, candidate, "tagged deterministic, but two runs on the same operands differ")
    return max((with_out, without_out), key=lambda c: c.worst_ratio)


# ---- the public API on non-contiguous tensors --------------------------------------------------------


def scattered_copy(t: torch.Tensor, layout: str = "channels_first") -> torch.Tensor:
    """A view with ``t``'s values that is dense in no layout.

    It lives in a larger buffer laid out in ``layout`` (so the call still
    detects that layout): every dimension one longer, and the innermost one
    taken with step 2. Only a tensor with a single element stays dense.
    """
    if t.dim() < 3:
        layout = "channels_first"
    inner = layout_order(t.dim(), layout)[-1]
    big_shape = [s + 1 for s in t.shape]
    big_shape[inner] = 2 * t.shape[inner] + 1
    big = empty_strided_for(tuple(big_shape), t.dtype, layout, t.device).fill_(math.nan)
    index = [slice(0, s) for s in t.shape]
    index[inner] = slice(0, 2 * t.shape[inner], 2)
    view = big[tuple(index)]
    view.copy_(t)
    return view


def _public_conv(problem: ConvProblem):
    import conv_core

    return {1: conv_core.conv1d, 2: conv_core.conv2d, 3: conv_core.conv3d}[problem.ndim]


def _call_kwargs(problem: ConvProblem, backend: str) -> dict:
    return dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation, groups=problem.groups,
                backend=backend)


def _has_candidate(problem: ConvProblem, backend: str, device: torch.device) -> bool:
    return bool(_registry().candidates(problem, device, only=backend)[0])


def noncontiguous_operands(problem: ConvProblem, device: torch.device | str, seed: int = 0) -> tuple:
    """``random_operands`` moved into non-contiguous views (the bias stays dense: the core passes it through)."""
    operands = random_operands(problem, device, seed)
    return tuple(scattered_copy(t, problem.layout) if i < 2 else t for i, t in enumerate(operands))


def check_noncontiguous(problem: ConvProblem, backend: str, device: torch.device | str,
                        seed: int = 0) -> Comparison:
    """Call the public ``conv_core.conv{1,2,3}d(..., backend=backend)`` on non-contiguous tensors.

    ``fwd``: the input and weight are strided views; the result must match
    the reference. ``bwd_data`` / ``bwd_weight``: a forward call (through
    the same backend) and ``backward`` with a strided output gradient; the
    input's (weight's) gradient must match the reference. If the backend has
    no forward candidate for the problem's geometry, the backward function
    the autograd graph would call is called directly instead.
    """
    device = torch.device(device)
    what = f"public API, non-contiguous operands, backend={backend}"
    if problem.weight_dtype != problem.dtype:
        return failed(problem, None, f"{what}: the public API needs the weight in the input's dtype")
    run = {"fwd": _noncontiguous_forward, "bwd_data": _noncontiguous_backward,
           "bwd_weight": _noncontiguous_backward}[problem.direction]
    try:
        result, operands = run(problem, backend, device, seed)
        candidate = _ranked_candidate(problem, backend, device)
    except Exception as exc:
        return failed(problem, None, f"{what}: raised {type(exc).__name__}: {exc}")
    issue = _result_issue(problem, result)
    if issue and (problem.direction == "fwd" or "dense" not in issue):  # only the forward promises a layout
        return failed(problem, None, f"{what}: {issue}")
    comparison = compare(problem, result, operands, candidate)
    return Comparison(comparison.ok, comparison.worst_ratio, comparison.relative_l2, comparison.bad_elements,
                      comparison.nan_elements, f"{what}: {comparison.message}")


def _ranked_candidate(problem: ConvProblem, backend: str, device: torch.device) -> Candidate | None:
    """The candidate the engine runs for ``problem`` (its tags and error factor set the tolerance)."""
    from ..engine import get_engine

    ranking = get_engine().ranking(problem, device, backend)
    return ranking.best.candidate if ranking.ranked else None


def _noncontiguous_forward(problem: ConvProblem, backend: str, device: torch.device, seed: int):
    x, w, bias = noncontiguous_operands(problem, device, seed)
    with torch.no_grad():
        y = _public_conv(problem)(x, w, bias, activation=problem.activation, out_dtype=problem.out_dtype,
                                  **_call_kwargs(problem, backend))
    return y, (x, w, bias)


def _noncontiguous_backward(problem: ConvProblem, backend: str, device: torch.device, seed: int):
    """The gradient of ``problem``'s direction through the public API (or the backward function it calls)."""
    a, b = noncontiguous_operands(problem, device, seed)
    if problem.direction == "bwd_data":
        dy, w = a, b
        x = scattered_copy(torch.zeros(problem.input_shape, dtype=torch_dtype(problem.dtype), device=device),
                           problem.layout)
    else:
        x, dy = a, b
        w = scattered_copy(torch.zeros(problem.weight_shape, dtype=torch_dtype(problem.dtype), device=device))
    forward = problem.replace(direction="fwd")
    if not _has_candidate(forward, backend, device):
        return _backward_function(problem, backend, device, x, w, dy), (a, b)
    wanted = x if problem.direction == "bwd_data" else w
    wanted.requires_grad_(True)
    with torch.enable_grad():
        y = _public_conv(problem)(x, w, None, **_call_kwargs(problem, backend))
        (grad,) = torch.autograd.grad(y, wanted, dy)
    return grad, (a, b)


def _backward_function(problem: ConvProblem, backend: str, device: torch.device, x, w, dy) -> torch.Tensor:
    from .. import routes
    from ..call import ConvArgs

    args = ConvArgs.of(problem.ndim, w, problem.stride, problem.padding, problem.dilation, problem.groups, None,
                       None, backend)
    if problem.direction == "bwd_data":
        return routes.backward_data(dy, w, problem.input_shape, problem.layout, args)
    return routes.backward_weight(x, dy, problem.weight_shape, args)


def pick_noncontiguous_problem(problems: Sequence[ConvProblem]) -> ConvProblem | None:
    """The problem best suited to :func:`check_noncontiguous`.

    It must have more than one channel and pixel (with one, a strided view can
    look like another layout to the call, which would then ask the backend a
    different problem); then 2D, with groups, stride, asymmetric padding and
    bias preferred, since strided operands meet more index arithmetic there.
    """
    def score(p: ConvProblem) -> tuple:
        many = p.in_channels > 1 and p.out_channels > 1 and math.prod(p.input_size) > 1 and \
            math.prod(p.output_size) > 1
        features = (p.groups > 1) + (max(p.stride) > 1) + (p.symmetric_padding is None) + p.bias
        return (not many, p.ndim != 2, p.weight_dtype != p.dtype, -features)

    return min(problems, key=score, default=None)


# ---- metadata ------------------------------------------------------------------------------------------


def check_metadata(problem: ConvProblem, candidate: Candidate, device: torch.device | str) -> list[str]:
    """What is wrong with ``candidate``'s metadata (empty list: nothing).

    The kernel id must come back from a second call of the hook (tuning data
    and cached choices are keyed on it) and be unique in that answer; tags
    must be strings; ``estimate_us`` finite and positive (the ranking compares
    it across backends); ``error_factor`` finite and at least 1;
    ``workspace_bytes`` a non-negative int, non-zero exactly when the
    candidate is tagged ``needs_workspace``.
    """
    issues = []
    if not all(isinstance(tag, str) for tag in candidate.tags):
        issues.append(f"tags {sorted(map(repr, candidate.tags))} are not all strings")
    estimate, factor = _number(candidate.estimate_us), _number(candidate.error_factor)
    if not (math.isfinite(estimate) and estimate > 0):
        issues.append(f"estimate_us={candidate.estimate_us!r} is not a finite number > 0")
    if not (math.isfinite(factor) and factor >= 1):
        issues.append(f"error_factor={candidate.error_factor!r} is not a finite number >= 1")
    if not (isinstance(candidate.workspace_bytes, numbers.Integral) and candidate.workspace_bytes >= 0):
        issues.append(f"workspace_bytes={candidate.workspace_bytes!r} is not an int >= 0")
    elif (candidate.workspace_bytes > 0) != ("needs_workspace" in candidate.tags):
        issues.append(f"workspace_bytes={candidate.workspace_bytes} but the needs_workspace tag is "
                      f"{'absent' if candidate.workspace_bytes else 'present'}")
    issues.extend(_id_stability_issues(problem, candidate, torch.device(device)))
    return [f"{candidate.kernel_id} on {problem.key}: {issue}" for issue in issues]


def _number(value) -> float:
    """``value`` as a float, NaN if it is not a real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    return float(value)


def _id_stability_issues(problem: ConvProblem, candidate: Candidate, device: torch.device) -> list[str]:
    registry = _registry()
    answers = [[c.kernel_id for c in registry.candidates(problem, device, only=candidate.backend)[0]]
               for _ in range(2)]
    issues = []
    if any(candidate.kernel_id not in ids for ids in answers):
        issues.append(f"kernel id not returned again by the hook (got {answers})")
    if answers[0] != answers[1]:
        issues.append(f"two calls of the hook returned different kernel ids: {answers[0]} vs {answers[1]}")
    duplicates = sorted(k for k, n in Counter(answers[0]).items() if n > 1)
    if duplicates:
        issues.append(f"kernel ids returned more than once for one problem: {duplicates}")
    return issues


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
    from ..arch import device_arch

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


def noncontiguous_problems(pairs: Iterable[tuple[ConvProblem, Candidate]]) -> list[ConvProblem]:
    """One problem per (direction, dtype, layout) that has a candidate, chosen by :func:`pick_noncontiguous_problem`."""
    groups: dict[tuple[str, str, str], list[ConvProblem]] = {}
    for problem, _ in pairs:
        groups.setdefault((problem.direction, problem.dtype, problem.layout), []).append(problem)
    return [pick_noncontiguous_problem(found) for found in groups.values()]
