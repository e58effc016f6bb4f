"""conv-core: pluggable convolutions for PyTorch.

Call :func:`conv2d` (or ``conv1d``/``conv3d``, ``conv_transpose1d/2d/3d``) where
you called ``torch.nn.functional.conv2d``; the best installed backend runs it,
forward and backward. See ``docs/`` for the design and for writing a backend.
"""

__version__ = "0.1.0"

from .candidate import BackendInfo, Candidate, Declined  # noqa: E402
from .engine import NoCandidateError, get_engine, reset  # noqa: E402
from .errors import ConvArgumentError  # noqa: E402
from .explanation import explain  # noqa: E402
from .frontend.capture import capture_shapes  # noqa: E402
from .conversion import convert, revert  # noqa: E402
from .fusion.fuse import optimize_for_inference  # noqa: E402
from . import nn  # noqa: E402
from .functional import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d  # noqa: E402
from .hookspec import hookimpl  # noqa: E402
from .problem import ConvProblem  # noqa: E402
from .frontend import ops  # noqa: E402,F401  (registers the torch.library custom ops)

__all__ = [
    "BackendInfo", "Candidate", "ConvArgumentError", "ConvProblem", "Declined", "NoCandidateError", "capture_shapes",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convert", "explain",
    "get_engine", "hookimpl", "nn", "optimize_for_inference", "reset", "revert",
]
