"""Where conv-core runs: the devices, the software versions and the settings that decide what it does.

``conv-core info`` prints it, and every benchmark record carries it (:mod:`conv_tools.bench_record`), so
a figure always says which GPU, driver, torch, triton and cuDNN it was measured with.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata

import torch

from . import __version__


def gather_info() -> dict:
    """Devices, versions, tuning database and settings, as JSON-ready data."""
    from .arch import device_arch
    from .settings import Settings
    from .tuning import read_entries

    settings = Settings.from_env()
    entries = read_entries(settings.tuning_db)
    return {
        "devices": _devices(device_arch),
        "versions": _versions(),
        "tuning_db": {"path": str(settings.tuning_db), "exists": settings.tuning_db.exists(),
                      "entries": len(entries), "devices": sorted({e.device for e in entries})},
        "settings": {
            "plugins (CONV_CORE_PLUGINS)": ",".join(sorted(settings.allow)) if settings.allow else "all",
            "disabled (CONV_CORE_DISABLE_PLUGINS)": ",".join(sorted(settings.block)) or "none",
            "forced backend (CONV_CORE_BACKEND)": settings.force_backend or "none",
            "trace (CONV_CORE_TRACE)": settings.trace,
            "first-use benchmark (CONV_CORE_BENCHMARK)": settings.benchmark,
            "non-deterministic by time (CONV_CORE_NONDETERMINISTIC)": settings.nondeterministic,
            "estimates may displace aten (CONV_CORE_TRUST_ESTIMATES)": settings.trust_estimates,
            "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("CONV_CORE_")} or "none",
        },
    }


def _devices(device_arch) -> list[dict]:
    devices = [{"device": "cpu", "arch": "cpu", "name": platform.processor() or platform.machine(),
                "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append({"device": f"cuda:{i}", "arch": device_arch(f"cuda:{i}"), "name": props.name,
                            "memory_gib": round(props.total_memory / 2**30, 1),
                            "multiprocessors": props.multi_processor_count})
    return devices


def _versions() -> dict:
    def package(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "conv-core": __version__, "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "torchvision": package("torchvision"), "triton": package("triton"),
        "pluggy": package("pluggy"), "numpy": package("numpy"), "cuda": torch.version.cuda, "hip": torch.version.hip,
        "cudnn": cudnn, "driver": _driver_version(),
    }


def _driver_version() -> str | None:
    """The GPU driver's version from ``nvidia-smi`` (or ``rocm-smi``); None if neither answers."""
    if not torch.cuda.is_available():
        return None
    commands = (["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                ["rocm-smi", "--showdriverversion"])
    for command in commands:
        if shutil.which(command[0]) is None:
            continue
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if lines:
            return lines[0] if command[0] == "nvidia-smi" else lines[-1]
    return None
