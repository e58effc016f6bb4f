"""The checks of one candidate on one problem: against the reference, and its metadata.

Each returns its findings instead of raising (a :class:`~conv_core.reference.Comparison`, or a list
of issues), so that a conformance run (:mod:`conv_core.testing.conformance`) can report them all.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter

import torch

from ..candidate import Candidate
from ..engine import get_engine
from ..layout import is_dense_in
from ..problem import ConvProblem, torch_dtype
from ..reference import Comparison, compare, random_operands


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


def result_issue(problem: ConvProblem, result: object) -> str | None:
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
    issue = result_issue(problem, fresh)
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
    registry = get_engine().registry
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
