"""Environment variables that steer the core, read in one place.

| variable | effect |
| --- | --- |
| ``CONV_CORE_PLUGINS`` | comma list: load only these entry-point backends (``aten`` is always loaded) |
| ``CONV_CORE_DISABLE_PLUGINS`` | comma list: never load these entry-point backends |
| ``CONV_CORE_BACKEND`` | force every call to this backend (an error if it has no candidate) |
| ``CONV_CORE_TRACE`` | ``1``: log every ranking decision (``conv_core`` logger, to stderr) |
| ``CONV_CORE_TUNING_DB`` | the tuning database (default ``${XDG_CACHE_HOME:-~/.cache}/conv-core/tuning.json``) |
| ``CONV_CORE_BENCHMARK`` | ``1``: time each new problem's candidates once, on first use (never while capturing) |
| ``CONV_CORE_FIRST_USE_DIR`` | first-use timings kept here (default ``<cache>/conv-core/first-use``; ``off``: none) |
| ``CONV_CORE_NONDETERMINISTIC`` | ``1``: rank ``atomics`` candidates by time (default: after the non-atomics ones) |
| ``CONV_CORE_TRUST_ESTIMATES`` | ``1``: estimates may displace aten (default: only measured times, by a margin) |

Settings are read when the registry loads or a choice is first made; call
``conv_core.reset()`` after changing them in a running process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _names(variable: str) -> frozenset[str] | None:
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def _flag(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    allow: frozenset[str] | None
    block: frozenset[str]
    force_backend: str | None
    trace: bool
    tuning_db: Path
    benchmark: bool
    nondeterministic: bool
    trust_estimates: bool = False
    #: The folder of :mod:`conv_core.first_use`'s files; None: first-use timings are kept in memory only (the
    #: default here, so that a Settings built by hand never writes to the user's cache; ``from_env`` fills it).
    first_use_dir: Path | None = None

    @classmethod
    def from_env(cls) -> Settings:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "conv-core"
        default_db = cache / "tuning.json"
        first_use = os.environ.get("CONV_CORE_FIRST_USE_DIR", str(cache / "first-use")).strip()
        return cls(
            allow=_names("CONV_CORE_PLUGINS"),
            block=_names("CONV_CORE_DISABLE_PLUGINS") or frozenset(),
            force_backend=os.environ.get("CONV_CORE_BACKEND", "").strip() or None,
            trace=_flag("CONV_CORE_TRACE"),
            tuning_db=Path(os.environ.get("CONV_CORE_TUNING_DB", default_db)),
            benchmark=_flag("CONV_CORE_BENCHMARK"),
            nondeterministic=_flag("CONV_CORE_NONDETERMINISTIC"),
            trust_estimates=_flag("CONV_CORE_TRUST_ESTIMATES"),
            first_use_dir=None if first_use.lower() in {"", "off"} else Path(first_use).expanduser(),
        )
