"""A backend whose candidates hook is spelled ``conv_core_candidate``, one letter short.

pluggy registers an implementation of a hook it has no spec for without a word,
so such a backend would load and then never offer a candidate. conv-core must
refuse to load it instead, naming the misspelled hook and the one it resembles.
"""

from conv_core import BackendInfo, hookimpl

NAME = "misspelled_hook"


@hookimpl
def conv_core_backend_info():
    return BackendInfo(NAME, "0.1.0", ("cpu",), "its candidates hook is misspelled (integration tests)")


@hookimpl
def conv_core_candidate(problem, device):
    raise AssertionError("conv-core must never call a hook that is not in its spec")
