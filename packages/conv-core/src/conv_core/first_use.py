"""First-use timings kept on disk, so that a second process in benchmark mode starts warm.

Benchmark mode (``CONV_CORE_BENCHMARK=1``, or ``torch.backends.cudnn.benchmark = True`` on a GPU) times a new
problem's candidates at its first call: seconds per model, paid again by every process if the times lived only
in memory. This module keeps them in the user's cache directory (``CONV_CORE_FIRST_USE_DIR``).

A time is only valid for what produced it: the device, its driver, torch, cuDNN and every loaded backend's
version. That set is the *scope*, and each scope has a file of its own, ``<dir>/<short hash of scope>.json``,
which records the scope too (a person can tell what a file is for, and a collision or a copied file is caught).
An upgraded plugin or driver therefore lands in a new file and never reuses stale times; an old file is simply
never read again. Within a file, an entry per problem key, backend restriction and deterministic flag holds the
microseconds measured per kernel id and the kernel ids that failed, with the reason.

The store must never cost a convolution its result. Every write takes an exclusive lock on ``<file>.lock``,
re-reads the file, merges, and replaces it through a temporary file in the same folder (``os.replace`` is
atomic), so that concurrent processes (DDP ranks, parallel jobs) lose nothing and a reader never sees half a
file. A damaged or foreign file reads as empty (one warning) and the next write replaces it; a failed write (a
read-only cache, a full disk) is logged once and the store keeps its times in memory for the rest of the process.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import platform
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; a lost race there costs a re-measurement, never a result
    fcntl = None

log = logging.getLogger("conv_core")

#: The ``format`` of a store file; a file of any other format is read as empty and replaced by the next write.
FORMAT = "conv-core-first-use/1"


@dataclass(frozen=True)
class Measured:
    """One problem's first-use measurement: microseconds by kernel id, and the failed kernel ids' reasons."""

    us: dict[str, float]
    failed: dict[str, str]

    def to_json(self) -> dict:
        return {"us": dict(sorted(self.us.items())), "failed": dict(sorted(self.failed.items()))}

    @classmethod
    def from_json(cls, data) -> Measured | None:
        """The entry, or None when ``data`` is not one (a damaged file)."""
        if not isinstance(data, dict):
            return None
        us, failed = data.get("us"), data.get("failed", {})
        if not (isinstance(us, dict) and isinstance(failed, dict)):
            return None
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in us.values()):
            return None
        if not all(isinstance(v, str) for v in failed.values()):
            return None
        return cls({k: float(v) for k, v in us.items()}, dict(failed))


def entry_key(problem_key: str, backend: str | None, deterministic: bool) -> str:
    """The key of one measurement in a file: the candidates timed depend on all three."""
    return f"{problem_key} | backend={backend or '*'} | {'deterministic' if deterministic else 'any'}"


@functools.cache
def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux; what ``platform`` says elsewhere)."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown cpu"


@functools.cache
def _gpu_driver() -> str | None:
    """The driver's CUDA version as torch reports it without a subprocess (None where torch cannot tell)."""
    getter = getattr(torch._C, "_cuda_getDriverVersion", None)
    try:
        return str(getter()) if getter is not None else None
    except Exception:  # no driver, or a torch build without CUDA: the rest of the scope still holds
        return None


def scope(device: torch.device | str, versions: dict[str, str]) -> dict:
    """Everything that makes a first-use time of ``device`` stale; ``versions`` is ``Engine.versions()``."""
    from .arch import device_name

    device = torch.device(device)
    gpu = device.type == "cuda"
    cudnn = torch.backends.cudnn.version() if gpu and torch.backends.cudnn.is_available() else None
    return {
        "device": f"cpu: {_cpu_model()}" if device.type == "cpu" else device_name(device),
        "toolkit": (torch.version.cuda or (f"hip {torch.version.hip}" if torch.version.hip else None)) if gpu else None,
        "driver": _gpu_driver() if gpu else None,
        "torch": torch.__version__,
        "cudnn": cudnn,
        "backends": dict(sorted(versions.items())),
    }


def scope_hash(scope: dict) -> str:
    """The short hash that names a scope's file."""
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (created if missing) for the block; no lock where fcntl is missing."""
    if fcntl is None:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class FirstUseStore:
    """The first-use measurements of one engine: each scope's file read once, lazily, then served from memory;
    each new measurement written through at once (they are rare: one per problem). ``directory=None``: off,
    memory only."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._entries: dict[str, dict[str, Measured]] = {}  # by scope hash
        self._warned: set[Path] = set()
        self._memory_only = self.directory is None
        self._lock = threading.Lock()

    def path(self, scope: dict) -> Path | None:
        """The file of ``scope`` (None when the store is off)."""
        return None if self.directory is None else self.directory / f"{scope_hash(scope)}.json"

    def get(self, scope: dict, key: str) -> Measured | None:
        with self._lock:
            return self._known(scope).get(key)

    def put(self, scope: dict, key: str, measured: Measured) -> None:
        """Keep ``measured`` and write it through to the scope's file (merged with what other processes wrote)."""
        with self._lock:
            known = self._known(scope)
            known[key] = measured
            if self._memory_only:
                return
            path = self.path(scope)
            try:
                known.update(self._write(path, scope, known, key))
            except OSError as exc:
                self._memory_only = True
                log.warning("conv_core: cannot write first-use timings to %s (%s); they are kept in memory for "
                            "this process only (CONV_CORE_FIRST_USE_DIR moves or disables the store)", path, exc)

    # ---- the file ------------------------------------------------------------

    def _known(self, scope: dict) -> dict[str, Measured]:
        name = scope_hash(scope)
        if name not in self._entries:
            self._entries[name] = {} if self.directory is None else self._read(self.path(scope), scope)
        return self._entries[name]

    def _read(self, path: Path, scope: dict) -> dict[str, Measured]:
        """The entries of ``path``; empty when it is missing, and (warned once) when it is unreadable, damaged
        or not this scope's."""
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # ValueError: not JSON, or not text at all
            return self._damaged(path, f"{type(exc).__name__}: {exc}")
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            return self._damaged(path, f"format {found!r}, expected {FORMAT!r}")
        if data.get("scope") != scope:
            return self._damaged(path, "written for another scope")
        raw = data.get("entries")
        entries = {k: Measured.from_json(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        if not isinstance(raw, dict) or None in entries.values():
            self._damaged(path, "malformed entries")
        return {k: v for k, v in entries.items() if v is not None}

    def _damaged(self, path: Path, why: str) -> dict[str, Measured]:
        if path not in self._warned:
            self._warned.add(path)
            log.warning("conv_core: ignoring the first-use timings in %s (%s); the next measurement rewrites it",
                        path, why)
        return {}

    def _write(self, path: Path, scope: dict, known: dict[str, Measured], key: str) -> dict[str, Measured]:
        """Under the lock: re-read ``path``, merge (the file's entries, ours where it lacks them, and ``key``
        as just measured), replace it atomically. Returns the merged entries."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_name(path.name + ".lock")):
            merged = {**known, **self._read(path, scope), key: known[key]}
            document = {"format": FORMAT, "scope": scope,
                        "entries": {k: merged[k].to_json() for k in sorted(merged)}}
            fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(document, f, indent=1)
                os.replace(temporary, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        return merged
