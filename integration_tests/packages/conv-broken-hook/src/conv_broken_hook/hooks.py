"""A backend that loads fine but whose hooks raise, like one with a bug in its problem filter.

``conv_core_candidates`` raises on every problem and ``conv_core_tuning_tables``
raises too: conv-core must record both as failures of this backend (and a
``Declined("failed: ...")`` per problem) while every convolution still runs.
"""

from conv_core import BackendInfo, hookimpl

NAME = "broken_hook"
MESSAGE = "conv-broken-hook: simulated bug in conv_core_candidates"


@hookimpl
def conv_core_backend_info():
    return BackendInfo(NAME, "0.1.0", ("cpu",), "raises from its hooks (integration tests)")


@hookimpl
def conv_core_candidates(problem, device):
    raise RuntimeError(MESSAGE)


@hookimpl
def conv_core_tuning_tables():
    raise OSError("conv-broken-hook: simulated failure listing tuning tables")
