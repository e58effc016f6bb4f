"""Small in-test backends, loaded through real EntryPoint objects by test_registry.py."""

import contextlib

import torch
import torch.nn.functional as F

from conv_core import BackendInfo, Candidate, Declined, hookimpl
from conv_core.backends import aten


class Backend:
    """A backend that offers aten's kernel under its own name, with a chosen estimate."""

    def __init__(self, name, estimate_us=1.0, tags=(), kernel="k", configs=("c",)):
        self.name, self.estimate_us, self.tags, self.kernel, self.configs = name, estimate_us, tags, kernel, configs
        self.calls = 0

    @hookimpl
    def conv_core_backend_info(self):
        return BackendInfo(self.name, "1.0", ("cpu",), "test backend")

    @hookimpl
    def conv_core_candidates(self, problem, device):
        self.calls += 1
        if problem.dtype == "float64":
            return [Declined(self.name, "no float64")]
        (base,) = aten.conv_core_candidates(problem, device)
        return [Candidate(self.name, self.kernel, c, base.run, self.estimate_us, frozenset(self.tags))
                for c in self.configs]


GOOD = Backend("good", estimate_us=1.0)
SLOW = Backend("slow", estimate_us=1e9)
EXPERIMENTAL = Backend("fancy", estimate_us=1e-3, tags=("experimental",))
ATOMIC = Backend("atomic", estimate_us=1e-6, tags=("atomics", "cuda_graph_safe"))  # the fastest estimate


class Raising(Backend):
    @hookimpl
    def conv_core_candidates(self, problem, device):
        raise RuntimeError("boom in candidates")


class Malformed(Backend):
    @hookimpl
    def conv_core_candidates(self, problem, device):
        return ["not a candidate"]


class FailsWhenRun(Backend):
    @hookimpl
    def conv_core_candidates(self, problem, device):
        def run(*args, out=None):
            raise RuntimeError("kernel exploded")

        return [Candidate(self.name, "bad", "c", run, estimate_us=1e-6)]


class BadInfo:
    @hookimpl
    def conv_core_backend_info(self):
        return "not info"


class Misspelled(Backend):
    """The hook ``conv_core_candidates`` spelled without its ``s``: pluggy alone would accept it silently."""

    @hookimpl
    def conv_core_candidate(self, problem, device):
        return []


class Unknown(Backend):
    """A hook implementation whose name is no hook at all."""

    @hookimpl
    def conv_core_warmup(self):
        return None


RAISING = Raising("raising")
MALFORMED = Malformed("malformed")
FAILS_WHEN_RUN = FailsWhenRun("failsrun")
BAD_INFO = BadInfo()
DUPLICATE = Backend("good")
MISSPELLED = Misspelled("misspelled")
UNKNOWN = Unknown("unknown")

raise_on_import = None


def device():
    return torch.device("cpu")


@contextlib.contextmanager
def deterministic_algorithms():
    """``torch.use_deterministic_algorithms(True)`` for the block; the previous mode is restored after it."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


class AtomicBackend:
    """Offers a fast ``atomics`` candidate for the forward and the weight gradient, counting its runs."""

    def __init__(self):
        self.runs = []

    @hookimpl
    def conv_core_backend_info(self):
        return BackendInfo("atomic", "1.0", ("cpu",), "test backend")

    @hookimpl
    def conv_core_candidates(self, problem, device):
        if problem.direction == "bwd_data":
            return [Declined("atomic", "no data gradient")]
        geometry = dict(stride=problem.stride, padding=problem.symmetric_padding, dilation=problem.dilation,
                        groups=problem.groups)

        def run(a, b, bias=None, *, out=None):
            self.runs.append(problem.direction)
            if problem.direction == "fwd":
                result = F.conv2d(a, b, bias, **geometry)
            else:
                result = torch.nn.grad.conv2d_weight(a, problem.result_shape, b, **geometry)
            return result if out is None else out.copy_(result)

        return [Candidate("atomic", "k", "c", run, estimate_us=1e-6, tags=frozenset({"atomics"}))]
