"""What a backend offers: its identity, its candidates, and its reasons to decline.

These are the values the hooks in :mod:`conv_core.hookspec` return. They are
plain frozen dataclasses so that the core can check them (a wrong candidate is
recorded as a plugin error, never run) and print them (``explain``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

#: Tags the core understands, each with what the core does with it. A backend may add tags of its own
#: (conv-rdna's ``interpreted``, say): the core accepts and shows them (``explain``), and acts on none.
KNOWN_TAGS = {
    "deterministic": ("bitwise the same result on every run with the same inputs; the conformance kit runs the "
                      "candidate twice on the same operands and fails it if the bits differ"),
    "cuda_graph_safe": ("can be captured in a CUDA graph (no host sync, no allocation that changes between runs); "
                        "while a capture is under way the engine runs the first ranked candidate with this tag"),
    "needs_workspace": ("allocates scratch memory beyond the result; the conformance kit fails a candidate whose "
                        "tag and Candidate.workspace_bytes disagree (the tag exactly when workspace_bytes > 0)"),
    "atomics": ("accumulates with atomics; results may differ in the last bits between runs; ranked after the "
                "candidates without it, never under torch.use_deterministic_algorithms (see conv_core.ranking)"),
    "experimental": "not run on hardware by its authors; ranked after every other candidate",
    "direct": ("is torch.nn.functional.conv*d on the operands as given (aten only): where it ranks first in every "
               "direction a call needs, the core calls that function itself, with PyTorch's autograd"),
    "transposed_epilogue": ("applies a data-gradient problem's bias and activation (a transposed convolution's "
                            "epilogue, bias per channel of the result) where the problem has them; a data-gradient "
                            "problem with an epilogue is offered only to candidates with this tag, others are "
                            "dropped"),
    "tf32": ("float32 operands are rounded to tf32 in the matrix units; the reference comparison's tolerance "
             "takes tf32's unit roundoff for it instead of float32's"),
}


@dataclass(frozen=True)
class BackendInfo:
    """A backend's identity, returned by ``conv_core_backend_info``."""

    name: str
    version: str
    targets: tuple[str, ...]
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"backend name {self.name!r} must be a non-empty identifier")
        object.__setattr__(self, "targets", tuple(self.targets))


#: ``run(a, b, bias=None, *, out=None) -> Tensor``; see :class:`Candidate`.
RunFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Candidate:
    """One way a backend can compute one problem.

    ``run`` takes the direction's two operands, dense in the problem's layout
    and dtypes (``fwd``: input, weight; ``bwd_data``: grad_output, weight;
    ``bwd_weight``: input, grad_output), plus ``bias`` (None where the problem
    has none) for a forward problem and a data gradient with an epilogue
    (:attr:`ConvProblem.transposed_epilogue`). It returns the result (shape
    ``problem.result_shape``, dtype ``problem.result_dtype``, dense in
    ``problem.layout``). When ``out`` is
    given it must write every element of ``out`` and return it; the
    conformance kit passes a poisoned ``out`` to prove that.

    ``estimate_us`` is the backend's own prediction of the run time; the core
    prefers measured times when it has them (see :mod:`conv_core.ranking`).
    ``error_factor`` widens the tolerance the conformance kit applies, for
    kernels whose arithmetic is less exact than a plain dot product (Winograd
    transforms, reduced-precision operands); see :mod:`conv_core.reference`.
    """

    backend: str
    kernel: str
    config: str
    run: RunFn = field(compare=False, repr=False)
    estimate_us: float
    tags: frozenset[str] = frozenset()
    workspace_bytes: int = 0
    error_factor: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", frozenset(self.tags))

    @property
    def kernel_id(self) -> str:
        """Stable id ``backend:kernel:config``; keys tuning data and breaks ranking ties."""
        return f"{self.backend}:{self.kernel}:{self.config}"


@dataclass(frozen=True)
class Declined:
    """A backend's statement that it has no candidate for a problem, and why.

    Returned in place of candidates so that ``explain`` can tell a user why a
    backend they expected to win was not considered.
    """

    backend: str
    reason: str


def check_candidate(item: object, backend: str) -> Candidate | Declined:
    """Return ``item`` if it is a well-formed Candidate or Declined of ``backend``; raise TypeError otherwise."""
    if isinstance(item, Declined):
        if item.backend != backend:
            raise TypeError(f"backend {backend!r} returned a decline labelled {item.backend!r}")
        return item
    if not isinstance(item, Candidate):
        raise TypeError(f"backend {backend!r} returned {type(item).__name__}, not a Candidate or Declined")
    if item.backend != backend:
        raise TypeError(f"backend {backend!r} returned a candidate labelled {item.backend!r}")
    if not callable(item.run):
        raise TypeError(f"candidate {item.kernel_id} has no callable run")
    if not (0 < item.estimate_us < float("inf")):
        raise TypeError(f"candidate {item.kernel_id} has estimate_us={item.estimate_us}; it must be finite and > 0")
    if ":" in item.kernel or ":" in item.config or " " in item.kernel_id:
        raise TypeError(f"candidate id {item.kernel_id!r} must not contain ':' in its parts or spaces")
    return item
