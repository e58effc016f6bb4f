"""Checks every Triton plugin's own tests make, written once: the single decline, a candidate's bits through
the JIT and through its launch site, and the ahead-of-time compile checks as pytest tests.

A plugin's test module binds them::

    compiled, test_compiles_cleanly = compile_check_tests("conv_rdna.aot", JOBS, aot.problems_of, 4, 900)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from conv_core_pytest import COMPILE_RUN

from .aot import compile_in_subprocess
from ..candidate import Declined


def the_decline(items: Sequence) -> str:
    """The reason of a hook answer that must be exactly one :class:`~conv_core.candidate.Declined`."""
    assert len(items) == 1 and isinstance(items[0], Declined), items
    return items[0].reason


def assert_launch_site_matches_jit(candidate, operands: Sequence[torch.Tensor], monkeypatch) -> None:
    """``candidate`` gives the same bits through Triton's JIT (``CONV_CORE_JIT_LAUNCH=1``) as through its launch
    site, whose first launch goes through the JIT and keeps the compiled kernel, and whose later ones call the
    compiled launcher directly: a wrong argument order or a kernel compiled for other alignments shows here."""
    monkeypatch.setenv("CONV_CORE_JIT_LAUNCH", "1")
    through_jit = candidate.run(*operands)
    monkeypatch.delenv("CONV_CORE_JIT_LAUNCH")
    candidate.run(*operands)
    assert torch.equal(candidate.run(*operands), through_jit), candidate.kernel_id


def compile_check_tests(module: str, jobs: Sequence, problems_of: Callable[[dict], list[str]],
                        seconds_per_job: float, floor_s: float) -> tuple[Callable, Callable]:
    """``(compiled, test_compiles_cleanly)`` for a plugin's compile-check test module: the module fixture
    that runs ``python -m <module>`` once (:func:`conv_core.testing.aot.compile_in_subprocess`, at least ``floor_s``
    seconds, ``seconds_per_job`` a job), and one test per job whose result must show no problem. Every test that
    uses the fixture, these and the module's own, is marked ``compile`` (``pytest -m "not compile"`` leaves the
    whole compile run out)."""

    def compiled(tmp_path_factory) -> dict[str, dict]:
        timeout = max(floor_s, seconds_per_job * len(jobs))
        return {r["id"]: r for r in compile_in_subprocess(module, tmp_path_factory.mktemp("aot"), timeout)}

    setattr(compiled, COMPILE_RUN, True)  # conv_core_pytest marks every test using it ``compile``
    compiled = pytest.fixture(scope="module")(compiled)

    @pytest.mark.parametrize("job", jobs, ids=[job.id for job in jobs])
    def test_compiles_cleanly(job, compiled):
        result = compiled.get(job.id)
        assert result is not None, f"{job.id} was not compiled"
        assert problems_of(result) == [], result

    return compiled, test_compiles_cleanly
