"""A backend whose ``conv_core_candidates`` returns malformed items.

Which malformation depends on the problem's batch size, so that one package
exercises three of the core's checks (``conv_core.candidate.check_candidate``):

- batch 1: a string instead of a Candidate;
- batch 2: a Candidate labelled with another backend's name (``aten``): it must
  not be able to impersonate the baseline;
- batch 3 and more: a Candidate with a negative ``estimate_us`` (which would
  otherwise sort before every honest candidate).

Each malformed candidate's ``run`` returns garbage, so if the core ever ranked
one, results would be wrong and the tests would see it.
"""

import torch

from conv_core import BackendInfo, Candidate, hookimpl

NAME = "broken_candidate"


def _garbage(a, b, bias=None, *, out=None):
    return torch.full((1,), float("nan"))


@hookimpl
def conv_core_backend_info():
    return BackendInfo(NAME, "0.1.0", ("cpu",), "returns malformed candidates (integration tests)")


@hookimpl
def conv_core_candidates(problem, device):
    if problem.batch == 1:
        return ["im2col please"]
    if problem.batch == 2:
        return [Candidate("aten", "native", "fake", run=_garbage, estimate_us=1e-6)]
    return [Candidate(NAME, "negative", "time", run=_garbage, estimate_us=-1.0)]
