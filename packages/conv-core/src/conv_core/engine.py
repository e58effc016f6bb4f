"""The engine: from a problem to a result, through the ranked candidates.

It owns the loaded backends, the measured times and the per-problem choice
cache. The first call of a problem gathers and ranks candidates; every later
call is a dictionary lookup and the chosen candidate's launch.

Faults are told apart. A transient failure (out of memory) is raised to the
caller and changes nothing: the same call may succeed later. Any other
failure of a candidate is recorded on its backend, the candidate is dropped
from that problem's ranking and the next one runs: a broken kernel costs
speed, never a result. The last candidate of a problem is never dropped, so
a problem always has one to run (its failure is raised instead).

Rankings are cached per ``torch.are_deterministic_algorithms_enabled()`` too,
since that switch rules non-deterministic (``atomics``) candidates out.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

import torch

from . import __version__
from .arch import device_arch, device_name
from .candidate import Candidate
from .errors import ConvArgumentError
from .first_use import FirstUseStore, Measured, entry_key, scope
from .plugins import Registry
from .problem import ConvProblem
from .ranking import (BASELINE_BACKEND, Ranked, Ranking, is_bare, measured_time, nondeterministic, rank,
                      worth_timing)
from .reference import random_operands
from .settings import Settings
from .timing import first_runs_together, is_capturing, median_us
from .tuning import Timings

log = logging.getLogger("conv_core")


#: aten's one candidate.
BASELINE_KERNEL = f"{BASELINE_BACKEND}:native:default"


class NoCandidateError(RuntimeError):
    """No backend (or not the one asked for) can run a problem."""


#: ``backend=`` value that lifts every restriction, ``CONV_CORE_BACKEND`` included (a forced backend's
#: missing backward directions run on the best other backend).
ANY_BACKEND = "*"


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` says nothing about the kernel (out of memory: another call may well succeed)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class Engine:
    def __init__(self, settings: Settings | None = None, registry: Registry | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.registry = registry or Registry(self.settings)
        self._rankings: dict[tuple[str, str, str | None, bool, bool], Ranking] = {}
        self._timings: dict[str, Timings] = {}
        #: First-use timings kept across processes (:mod:`conv_core.first_use`); ``reset()`` leaves them.
        self.first_use = FirstUseStore(self.settings.first_use_dir)
        self._lock = threading.Lock()
        if self.settings.trace and not log.handlers:
            log.addHandler(logging.StreamHandler())
            log.setLevel(logging.INFO)

    # ---- facts ---------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        """Backend name -> version string (aten's includes torch's version: cuDNN changes with it)."""
        versions = {b.name: b.info.version for b in self.registry.active()}
        versions["aten"] = f"{__version__}+torch{torch.__version__}"
        return versions

    def timings(self, device: torch.device) -> Timings:
        name = device_name(device)
        if name not in self._timings:
            self._timings[name] = Timings(name, device_arch(device), self.versions(), self.settings.tuning_db,
                                          self.registry.tuning_tables())
        return self._timings[name]

    # ---- choosing ------------------------------------------------------------

    def benchmark_mode(self, device: torch.device) -> bool:
        """Whether new problems are timed on first use: ``CONV_CORE_BENCHMARK=1``, or on a GPU
        ``torch.backends.cudnn.benchmark = True`` (the switch PyTorch users already set for this)."""
        return self.settings.benchmark or (device.type == "cuda" and torch.backends.cudnn.benchmark)

    def check_backend(self, name: str | None, argument: str = "backend") -> None:
        """Raise a ``ValueError`` naming ``argument`` unless ``name`` is None or a backend that loaded."""
        if name is None:
            return
        found = self.registry.get(name)
        if found is not None and found.ok:
            return
        loaded = ", ".join(b.name for b in self.registry.active())
        why = f"it failed to load: {found.load_error}" if found is not None else "no backend has that name"
        raise ConvArgumentError(f"{argument}={name!r} cannot be used: {why}; loaded backends: {loaded}")

    def ranking(self, problem: ConvProblem, device: torch.device, backend: str | None = None, *,
                may_time: bool = True) -> Ranking:
        """The (cached) ranking of ``problem`` on ``device``, restricted to ``backend`` if given.

        ``may_time=False`` (while tracing) never times candidates; with first-use benchmarking on, such a
        ranking is not kept, so the first eager call still times the problem.
        """
        backend = None if backend == ANY_BACKEND else backend or self.settings.force_backend
        deterministic = torch.are_deterministic_algorithms_enabled()
        benchmark = self.benchmark_mode(device)
        key = (problem.key, str(device), backend, deterministic, benchmark)
        found = self._rankings.get(key)
        if found is None:
            # Ranked outside the lock: a backend may itself call conv_core while being asked or timed.
            # Two threads racing on one new problem rank it twice and keep the first result.
            timing = may_time and benchmark and not is_capturing(device)
            ranking = self._rank(problem, device, backend, deterministic, timing)
            if benchmark and not timing:
                return ranking
            with self._lock:
                found = self._rankings.setdefault(key, ranking)
        return found

    def _rank(self, problem: ConvProblem, device: torch.device, backend: str | None,
              deterministic: bool, timing: bool) -> Ranking:
        self.check_backend(backend, "backend" if backend != self.settings.force_backend else "CONV_CORE_BACKEND")
        candidates, declined = self.registry.candidates(problem, device, only=backend)
        benchmarked, failed = None, {}
        timed = [c for c in candidates if not (deterministic and nondeterministic(c))]  # the others are excluded
        timed, known = self._unmeasured(problem, device, timed)
        if timing and timed:
            benchmarked, failed = self._first_use_times(problem, device, backend, deterministic, timed, known)
        ranking = rank(problem, [c for c in candidates if c.kernel_id not in failed], declined,
                       self.timings(device), benchmarked, allow_nondeterministic=self.settings.nondeterministic,
                       trust_estimates=self.settings.trust_estimates,
                       deterministic_mode=deterministic)
        ranking.excluded.extend((kernel_id, f"failed when benchmarked: {why}") for kernel_id, why in failed.items())
        if not ranking.ranked:
            reasons = [f"{d.backend}: {d.reason}" for d in ranking.declined]
            reasons += [f"{kernel_id}: {why}" for kernel_id, why in ranking.excluded]
            why = "; ".join(reasons) or "no backend is loaded"
            raise NoCandidateError(f"no candidate{f' of backend {backend!r}' if backend else ''} for {problem.key} "
                                   f"({why})")
        if self.settings.trace:
            log.info("conv_core: %s -> %s (%.1f us, %s)", problem.key, ranking.best.kernel_id, ranking.best.us,
                     ranking.best.source)
        return ranking

    def _unmeasured(self, problem: ConvProblem, device: torch.device,
                    candidates: list[Candidate]) -> tuple[list[Candidate], dict[str, float]]:
        """The candidates first-use timing must time, and the measured times (tuning database, shipped tables) of
        the others by kernel id: a measured time outranks a first-use one (:mod:`conv_core.ranking`), so timing
        such a candidate would only cost its compilation and the user's wait. Except aten's time of the problem
        without its epilogue: aten compiles nothing, and its epilogue is launches of its own (timed with them)."""
        timings, todo, known = self.timings(device), [], {}
        for c in candidates:
            found = measured_time(timings, problem, c.kernel_id)
            if found is None or (c.backend == BASELINE_BACKEND and is_bare(found)):
                todo.append(c)
            elif found.status == "ok":
                known[c.kernel_id] = found.us
        return todo, known

    def _first_use_times(self, problem: ConvProblem, device: torch.device, backend: str | None,
                         deterministic: bool, candidates: list[Candidate],
                         known: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
        """First-use (times, failures) of ``candidates``: read from the disk store when an earlier process of the
        same scope measured them (:mod:`conv_core.first_use`), else timed now and written to the store. ``known``:
        the measured times of the candidates not timed (aten's, when a table has it, still stops timing early)."""
        where, key = scope(device, self.versions()), entry_key(problem.key, backend, deterministic)
        stored = self.first_use.get(where, key)
        replayed = self._replay(stored, candidates, known) if stored is not None else None
        if replayed is not None:
            if self.settings.trace:
                log.info("conv_core: %s: first-use times read from %s", problem.key, self.first_use.path(where))
            return replayed
        times, failed, transient = self._benchmark(problem, device, candidates, known)
        if not transient:  # out of memory says nothing about a kernel: not kept for later processes
            self.first_use.put(where, key, Measured(times, failed))
        return times, failed

    def _replay(self, stored: Measured, candidates: list[Candidate],
                known: dict[str, float]) -> tuple[dict[str, float], dict[str, str]] | None:
        """What :meth:`_benchmark` would measure of ``candidates`` (the same ones, in the same order), taken from
        ``stored``; None when it lacks a candidate that would be timed (a new one: everything is timed again)."""

        def stored_result(c: Candidate) -> tuple[float | None, str | None]:
            if c.kernel_id in stored.us:
                return stored.us[c.kernel_id], None
            if c.kernel_id in stored.failed:
                return None, stored.failed[c.kernel_id]
            raise LookupError(c.kernel_id)

        try:
            return self._time_in_turn(candidates, known, stored_result)
        except LookupError:
            return None

    def _benchmark(self, problem: ConvProblem, device: torch.device, candidates: list[Candidate],
                   known: dict[str, float] | None = None) -> tuple[dict[str, float], dict[str, str], bool]:
        """Opt-in first-use timing: (times, failures) by kernel id, and whether a failure was transient (out of
        memory); a candidate that fails is not ranked. ``known`` holds measured times of candidates not timed
        here (aten's among them); which candidates are timed: :meth:`_time_in_turn`."""
        operands = random_operands(problem, device, seed=0, on_device=True)
        transient = False

        def timed(c: Candidate) -> tuple[float | None, str | None]:
            nonlocal transient
            try:
                return median_us(functools.partial(c.run, *operands), device, warmup=2, reps=10), None
            except Exception as exc:
                log.warning("conv_core: benchmarking %s failed: %s", c.kernel_id, exc)
                transient = transient or is_transient(exc)
                return None, f"{type(exc).__name__}: {exc}"

        def first_runs(plugins: list[Candidate]) -> None:
            first_runs_together([functools.partial(c.run, *operands) for c in plugins], device)

        times, failed = self._time_in_turn(candidates, known or {}, timed, first_runs)
        return times, failed, transient

    def _time_in_turn(self, candidates: list[Candidate], known: dict[str, float],
                      measure: Callable[[Candidate], tuple[float | None, str | None]],
                      before_plugins: Callable[[list[Candidate]], None] | None = None,
                      ) -> tuple[dict[str, float], dict[str, str]]:
        """(times, failures) of the candidates first use times, each from ``measure`` (its time, or why it
        failed): aten first, then the plugin candidates that could still win against aten's time (timed now or
        in ``known``; :func:`conv_core.ranking.worth_timing`), or all of them when estimates are trusted; those
        go to ``before_plugins`` first (their first runs, in parallel: :func:`conv_core.timing.first_runs_together`)."""
        times: dict[str, float] = {}
        failed: dict[str, str] = {}

        def take(c: Candidate) -> None:
            us, why = measure(c)
            if why is None:
                times[c.kernel_id] = us
            else:
                failed[c.kernel_id] = why

        plugins = [c for c in candidates if c.backend != BASELINE_BACKEND]
        for c in candidates:
            if c.backend == BASELINE_BACKEND:
                take(c)
        if not self.settings.trust_estimates:
            plugins = worth_timing(plugins, times.get(BASELINE_KERNEL, known.get(BASELINE_KERNEL)))
        if before_plugins is not None:
            before_plugins(plugins)
        for c in plugins:
            take(c)
        return times, failed

    # ---- running -------------------------------------------------------------

    def run(self, problem: ConvProblem, device: torch.device, operands: tuple, backend: str | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
        """Compute ``problem`` on dense operands with the best candidate that does not fail."""
        return self.execute(self.ranking(problem, device, backend), operands, out)

    def execute(self, ranking: Ranking, operands: tuple, out: torch.Tensor | None = None) -> torch.Tensor:
        """Run the first candidate of ``ranking`` that does not raise (see the module's text on faults).

        While a CUDA graph is captured, the first candidate tagged ``cuda_graph_safe`` runs instead (a
        capture records one launch sequence and replays it; a candidate that copies from the host or
        allocates per call would break the capture).
        """
        capturing = operands[0].is_cuda and torch.cuda.is_current_stream_capturing()
        while True:
            best: Ranked = _capture_safe(ranking.ranked) if capturing else ranking.ranked[0]
            try:
                return best.candidate.run(*operands, out=out)
            except Exception as exc:
                if is_transient(exc) or not self._drop(ranking, best, exc):
                    raise

    def _drop(self, ranking: Ranking, failed: Ranked, exc: Exception) -> bool:
        """Record ``failed``'s failure and drop it from ``ranking``; False when it is the last candidate
        (kept: a problem always keeps one to run)."""
        plugin = self.registry.get(failed.candidate.backend)
        if plugin is not None:
            plugin.record_failure(f"run of {failed.kernel_id} on {ranking.problem.key}", exc)
        with self._lock:
            if not any(r is failed for r in ranking.ranked):  # another thread dropped it already
                return True
            if len(ranking.ranked) == 1:
                return False
            ranking.ranked.remove(failed)
            ranking.excluded.append((failed.kernel_id, f"failed when run: {type(exc).__name__}: {exc}"))
            return True

    def reset(self) -> None:
        """Forget every cached choice and measured time (settings and backends stay)."""
        with self._lock:
            self._rankings.clear()
            self._timings.clear()
        for listener in _RESET_LISTENERS:
            listener()


def _capture_safe(ranked: list[Ranked]) -> Ranked:
    """The first candidate that may be captured in a CUDA graph (the first of all if none says so)."""
    return next((r for r in ranked if "cuda_graph_safe" in r.candidate.tags), ranked[0])


_engine: Engine | None = None
_engine_lock = threading.Lock()
#: Called after the engine forgets its choices (:meth:`Engine.reset`, :func:`reset`): what a layer above keeps of
#: them, such as the front end's caches of call routes (:mod:`conv_core.frontend.call_cache`), goes too.
_RESET_LISTENERS: list[Callable[[], None]] = []


def on_reset(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever the engine's choices are forgotten (the engine knows nothing of its users)."""
    _RESET_LISTENERS.append(listener)


def get_engine() -> Engine:
    """The process-wide engine, created on first use."""
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = Engine()
    return _engine


def reset() -> None:
    """Drop the process-wide engine: settings, backends and caches are re-read on next use."""
    global _engine
    with _engine_lock:
        _engine = None
    for listener in _RESET_LISTENERS:
        listener()
