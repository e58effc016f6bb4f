"""A backend with a well-formed, top-ranked candidate that raises when run.

It offers its candidate only for problems with ``out_channels == TRIGGER_OUT_CHANNELS``
(any direction, any device) and declines the rest, so that it does not hide
the other backends in the rest of the test suite. Its estimate is tiny, so it
ranks first there; conv-core must catch the error, record it on this backend,
drop the candidate from that problem's ranking and run the next candidate.
"""

from conv_core import BackendInfo, Candidate, Declined, hookimpl

NAME = "broken_run"
TRIGGER_OUT_CHANNELS = 13
MESSAGE = "conv-broken-run: simulated kernel crash"
KERNEL_ID = f"{NAME}:crash:always"


def _run(a, b, bias=None, *, out=None):
    raise RuntimeError(MESSAGE)


@hookimpl
def conv_core_backend_info():
    return BackendInfo(NAME, "0.1.0", ("any",), "a candidate that raises when run (integration tests)")


@hookimpl
def conv_core_candidates(problem, device):
    if problem.out_channels != TRIGGER_OUT_CHANNELS:
        return [Declined(NAME, f"only offers a candidate for out_channels={TRIGGER_OUT_CHANNELS}")]
    return [Candidate(NAME, "crash", "always", run=_run, estimate_us=1e-3)]
