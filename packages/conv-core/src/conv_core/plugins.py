"""Finding, loading and isolating backends.

Backends come from the entry-point group ``conv_core.backends`` plus the
built-in ``aten`` backend. They are loaded lazily, on the first call that
needs them. Every call into a backend goes through :class:`Backend`'s guards:
an import error, a hook that raises, or a malformed return value is recorded
on that backend (``conv-core backends`` shows it) and the backend is skipped;
the core and the other backends keep working. So is a hook implementation whose
name is no hook of :mod:`conv_core.hookspec` (``conv_core_candidate`` for
``conv_core_candidates``): pluggy would keep it without a word and the backend
would just never answer, so it fails that backend's load instead.
"""

from __future__ import annotations

import difflib
import logging
import threading
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pluggy
import torch

from . import hookspec
from .backends import aten
from .candidate import BackendInfo, Candidate, Declined, check_candidate
from .problem import ConvProblem
from .settings import Settings

log = logging.getLogger("conv_core")

ENTRY_POINT_GROUP = "conv_core.backends"


def _error_text(exc: BaseException) -> str:
    """``Type: message (at file:line)``; the line is where it was raised, except for a hook that pluggy
    refuses (the place is in pluggy, or here: the message names the plugin's own function)."""
    if isinstance(exc, pluggy.PluginValidationError):
        return f"{type(exc).__name__}: {exc}"
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _unknown_hook_text(name: str, impl: pluggy.HookImpl) -> str:
    """``unknown hook 'name' (did you mean 'real'?) at file:line`` for a hook implementation with no spec."""
    known = [hook for hook in dir(hookspec) if hook.startswith(f"{hookspec.PROJECT}_")]
    near = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {near[0]!r}?" if near else f"the hooks are {', '.join(known)}"
    code = getattr(impl.function, "__code__", None)
    where = f" (at {code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"unknown hook {name!r} ({hint}){where}"


@dataclass
class Backend:
    """One backend as the core sees it: where it came from, its identity, and what went wrong."""

    entry_point: str
    source: str
    plugin: object | None = None
    info: BackendInfo | None = None
    load_error: str | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.info.name if self.info else self.entry_point

    @property
    def ok(self) -> bool:
        return self.load_error is None and self.info is not None

    def record_failure(self, what: str, exc: BaseException) -> None:
        text = f"{what}: {_error_text(exc)}"
        log.warning("conv_core: backend %r failed in %s", self.name, text)
        if len(self.failures) < 50:
            self.failures.append(text)


class Registry:
    """The loaded backends, in a stable order (``aten`` first, then entry points by name)."""

    def __init__(self, settings: Settings, entry_points: list[metadata.EntryPoint] | None = None) -> None:
        self.settings = settings
        self._entry_points = entry_points
        self._backends: list[Backend] | None = None
        self._lock = threading.Lock()
        self._pm = pluggy.PluginManager(hookspec.PROJECT)
        self._pm.add_hookspecs(hookspec)

    # ---- loading -------------------------------------------------------------

    def backends(self) -> list[Backend]:
        """Every backend the settings allow, loaded or failed."""
        if self._backends is None:
            with self._lock:
                if self._backends is None:
                    self._backends = self._load_all()
        return self._backends

    def active(self) -> list[Backend]:
        """Backends that loaded without error."""
        return [b for b in self.backends() if b.ok]

    def get(self, name: str) -> Backend | None:
        return next((b for b in self.backends() if b.name == name), None)

    def _load_all(self) -> list[Backend]:
        backends = [self._register(Backend("aten", "builtin"), lambda: aten)]
        eps = self._entry_points
        if eps is None:
            eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
        for ep in sorted(eps, key=lambda e: e.name):
            if ep.name == "aten" or not self._allowed(ep.name):
                continue
            backends.append(self._register(Backend(ep.name, ep.value), ep.load))
        seen: set[str] = set()
        for b in backends:
            if b.ok and b.name in seen:
                b.load_error = f"another backend is already named {b.name!r}"
                self._pm.unregister(b.plugin)
            seen.add(b.name)
        return backends

    def _allowed(self, name: str) -> bool:
        if name in self.settings.block:
            return False
        return self.settings.allow is None or name in self.settings.allow

    def _register(self, backend: Backend, load) -> Backend:
        try:
            backend.plugin = load()
            self._pm.register(backend.plugin, name=backend.entry_point)
            self._check_hook_names(backend.plugin)
            info = self._call_one(backend, "conv_core_backend_info", {})
            if not isinstance(info, BackendInfo):
                raise TypeError(f"conv_core_backend_info returned {type(info).__name__}, not BackendInfo")
            backend.info = info
        except Exception as exc:  # a broken plugin must not break the core
            backend.load_error = _error_text(exc)
            log.warning("conv_core: backend %r failed to load: %s", backend.entry_point, backend.load_error)
            if backend.plugin is not None and self._pm.is_registered(backend.plugin):
                self._pm.unregister(backend.plugin)
        return backend

    def _check_hook_names(self, plugin: object) -> None:
        """Raise ``PluginValidationError`` naming every hook implementation of ``plugin`` that has no spec.

        pluggy's ``check_pending`` looks at every registered plugin, but each earlier one passed it (or was
        unregistered), so what it finds now is ``plugin``'s. Its own message names one hook and the plugin's
        repr; this one names each unknown hook, the nearest real one and where the function is defined.
        """
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError:
            unknown = [_unknown_hook_text(caller.name, impl) for caller in self._pm.get_hookcallers(plugin) or ()
                       if not caller.has_spec()
                       for impl in caller.get_hookimpls() if impl.plugin is plugin and not impl.optionalhook]
            if not unknown:
                raise
            raise pluggy.PluginValidationError(plugin, "; ".join(unknown)) from None

    def _call_one(self, backend: Backend, hook_name: str, kwargs: dict):
        """Call ``hook_name`` of this backend alone; None if it does not implement the hook."""
        caller = getattr(self._pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            if impl.plugin is backend.plugin:
                return impl.function(**{k: kwargs[k] for k in impl.argnames})
        return None

    # ---- asking --------------------------------------------------------------

    def candidates(self, problem: ConvProblem, device: torch.device,
                   only: str | None = None) -> tuple[list[Candidate], list[Declined]]:
        """Every active backend's well-formed candidates for ``problem``, and their declines."""
        found: list[Candidate] = []
        declined: list[Declined] = []
        for backend in self.active():
            if only is not None and backend.name != only:
                continue
            try:
                items = self._call_one(backend, "conv_core_candidates", {"problem": problem, "device": device})
                items = [check_candidate(item, backend.name) for item in (items or ())]
            except Exception as exc:
                backend.record_failure(f"conv_core_candidates({problem.key})", exc)
                declined.append(Declined(backend.name, f"failed: {_error_text(exc)}"))
                continue
            offered = [i for i in items if isinstance(i, Candidate)]
            if problem.transposed_epilogue:
                applying = [c for c in offered if "transposed_epilogue" in c.tags]
                if offered and not applying:
                    declined.append(Declined(backend.name, "no candidate tagged transposed_epilogue for a data "
                                                           "gradient with bias or activation"))
                offered = applying
            found.extend(offered)
            declined.extend(i for i in items if isinstance(i, Declined))
            if not items:
                declined.append(Declined(backend.name, "returned no candidates"))
        return found, declined

    def tuning_tables(self) -> list[tuple[str, Path]]:
        """(backend name, path) of every tuning table the active backends ship."""
        tables = []
        for backend in self.active():
            try:
                paths = self._call_one(backend, "conv_core_tuning_tables", {}) or ()
                tables.extend((backend.name, Path(p)) for p in paths)
            except Exception as exc:
                backend.record_failure("conv_core_tuning_tables()", exc)
        return tables
