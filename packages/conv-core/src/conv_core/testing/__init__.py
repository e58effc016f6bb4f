"""The conformance kit: a backend's candidates checked against the float64 reference.

- :class:`ConformanceSuite`: subclass it in a backend's tests (see ``docs/conformance.md``);
- :func:`run_conformance`: the same checks in plain Python, returning a :class:`Report`
  (what ``conv-core check`` runs);
- :func:`check_candidate`, :func:`check_noncontiguous`, :func:`check_metadata`: single checks;
- :func:`edge_problems`, :func:`random_problems`: the problems they run on;
- :mod:`.aot`: what the Triton backends' ahead-of-time compile checks share (CI runs them, a model never does).

Names are imported on first use, so that loading the pytest plugin (which every
pytest run in an environment with conv-core does) costs nothing more.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ConformanceSuite": "pytest_plugin",
    "Case": "conformance",
    "CheckResult": "conformance",
    "Collection": "conformance",
    "Report": "conformance",
    "check_candidate": "checks",
    "check_metadata": "checks",
    "check_noncontiguous": "noncontiguous",
    "collect": "conformance",
    "collect_cases": "conformance",
    "conformance_problems": "conformance",
    "coverage_issues": "conformance",
    "run_conformance": "conformance",
    "edge_problems": "cases",
    "random_problems": "cases",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
