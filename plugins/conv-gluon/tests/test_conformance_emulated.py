"""conv-core's conformance problems (edge cases and seeded random ones; all three directions, bf16 and fp16,
NHWC) through every candidate the backend offers for them on an H100, each run replayed by the CPU
emulator (``emulator.py``) and checked by the kit's own ``check_candidate``: poisoned ``out``, operands left
untouched, the same bits twice, the float64 reference under the tolerance model.

What this proves: the candidates' plans (every argument, the padded and transposed weights, the stride phases,
the weight gradient's units and splits) compute the convolutions the kit asks for. What it cannot: the kernels'
synchronisation and the hardware's behaviour, which ``test_gpu_harness.py`` checks on the GPU (its ``kit``
stage runs this same kit compiled).
"""

from __future__ import annotations

import functools

import pytest
import torch
from conv_core.candidate import Candidate
from conv_core.problem import torch_dtype
from conv_core.testing import check_candidate
from conv_core.testing.conformance import conformance_problems
from conv_gluon.registry import REGISTRY
from conv_gluon import candidates, plans as plan

import emulator

PROBLEMS = conformance_problems("sm_90", seed=0, random_count=12, dtypes=("bfloat16", "float16"),
                                layouts=("channels_last",), directions=("fwd", "bwd_data", "bwd_weight"),
                                max_macs=200_000)


def emulated_run(problem, p, a, b, bias=None, *, out=None):
    """A candidate's ``run`` with the kernel replayed on the CPU (the launcher's contract: dense result in the
    problem's layout, ``out`` written and returned)."""
    if isinstance(p, plan.DataGradPlan):
        y = emulator.run_bwd_data(p, problem, a, b)
    elif isinstance(p, plan.WeightGradPlan):
        y = emulator.run_bwd_weight(p, problem, a, b)
    else:
        y = emulator.run(p, a, b, bias, problem.output_shape, torch_dtype(problem.result_dtype))
    y = y.movedim(1, -1).contiguous().movedim(-1, 1)  # dense channels-last
    if out is None:
        return y
    out.copy_(y)
    return out


CASES = []
for _problem in PROBLEMS:
    for _item in candidates.candidates(_problem, torch.device("cuda")):
        if isinstance(_item, Candidate):
            CASES.append((_problem, _item))


def test_the_kit_has_cases_in_every_direction_and_mode():
    assert {p.direction for p, _ in CASES} == {"fwd", "bwd_data", "bwd_weight"}
    assert {c.kernel for _, c in CASES} == set(REGISTRY.names)
    modes = set()
    for _, c in CASES:
        p = c.run.plan
        modes |= {ph.plan.a_mode for ph in p.phases} if isinstance(p, plan.DataGradPlan) else {p.a_mode}
    assert modes == {"cp_async", "registers", "tma_box"}


@pytest.mark.parametrize("problem, candidate", CASES, ids=[f"{p.key} {c.kernel}" for p, c in CASES])
def test_candidate_on_the_kits_problem(problem, candidate):
    replayed = Candidate(candidate.backend, candidate.kernel, candidate.config,
                         run=functools.partial(emulated_run, problem, candidate.run.plan),
                         estimate_us=candidate.estimate_us, tags=candidate.tags,
                         workspace_bytes=candidate.workspace_bytes)
    outcome = check_candidate(problem, replayed, "cpu", seed=0)
    assert outcome.ok, outcome.message
