"""Suite benchmark runs kept together: ``conv-core bench --json`` files with when, where and how they were made.

A bench JSON file (one suite in one direction and layout, named ``<suite>_<direction>_<layout>.json``)
does not say when it ran or by which command. A *bundle* keeps runs of such files with that
information, in one gzip-compressed JSON file (``docs/benchmarks/raw/<backend>.json.gz``)::

    {"format": "conv-core-bench-runs/1",
     "runs": [{"name": "rdna-13 run 36", "date": "2026-11-22T00:55", "log": 17,
               "command": "BENCH_LAYOUTS=nhwc bash scripts/gpu_run.sh OUT bench:rdna",
               "software": "torch 2.11.0+cu130, cuDNN 9.19.0, triton 3.6.0",
               "files": {"resnet50_fwd_nhwc": {<the bench JSON>}, ...}}]}

The current page of a backend (:mod:`conv_tools.suite_page`) shows, for every suite, direction and
layout, the latest run that measured it (:func:`latest`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT = "conv-core-bench-runs/1"

#: The order pages list suites, directions and layouts in.
ORDER = ("resnet50", "sd_vae_decoder", "retinanet_head", "fwd", "bwd_data", "bwd_weight", "nhwc", "nchw")


@dataclass
class Run:
    """One run: its bench files by stem, and what is known of where they came from."""

    name: str
    files: dict[str, dict] = field(default_factory=dict)
    date: str | None = None
    command: str | None = None
    log: int | None = None
    software: str | None = None  # what the bench files do not record: torch, cuDNN, Triton versions

    @property
    def gpu(self) -> str | None:
        return next((f.get("device_name") for f in self.files.values()), None)

    @property
    def versions(self) -> dict[str, str]:
        return next((f.get("versions", {}) for f in self.files.values()), {})


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def read(paths) -> list[Run]:
    """The runs of bundles, folders of bench files (one run each) and single bench files (one run together)."""
    runs, loose = [], Run("bench files given")
    for path in map(Path, paths):
        if path.is_dir():
            runs.append(Run(path.name, {p.stem: _load(p) for p in sorted(path.glob("*_*_*.json"))}))
            continue
        data = _load(path)
        if data.get("format") == FORMAT:
            runs += [Run(**run) for run in data["runs"]]
        elif "rows" in data:
            loose.files[path.stem] = data
        else:
            raise ValueError(f"{path} is neither a bench JSON file nor a bundle of runs ({FORMAT})")
    return runs + ([loose] if loose.files else [])


def write(path: str | Path, runs: list[Run]) -> None:
    """The bundle at ``path``, gzip-compressed when it ends in ``.gz`` (byte for byte the same for the same runs)."""
    text = json.dumps({"format": FORMAT, "runs": [asdict(run) for run in runs]}, indent=None, sort_keys=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(text.encode())
    else:
        path.write_text(text + "\n")


def add(path: str | Path, run: Run) -> list[Run]:
    """The bundle at ``path`` (created if missing) with ``run`` added, replacing a run of the same name."""
    path = Path(path)
    runs = [r for r in (read([path]) if path.exists() else []) if r.name != run.name] + [run]
    write(path, runs)
    return runs


def sort_key(stem: str) -> tuple:
    """Suites, directions and layouts in :data:`ORDER` (unknown words last, alphabetically)."""
    words = stem.replace("sd_vae_decoder", "sd-vae-decoder").replace("retinanet_head", "retinanet-head")
    words = words.replace("bwd_data", "bwd-data").replace("bwd_weight", "bwd-weight").split("_")
    words = [w.replace("-", "_") for w in words]
    return tuple((ORDER.index(w) if w in ORDER else len(ORDER), w) for w in words)


def latest(runs: list[Run]) -> list[tuple[str, Run]]:
    """For each stem, the latest run that has it (by date; among equal dates, the later given)."""
    chosen: dict[str, tuple[tuple, Run]] = {}
    for order, run in enumerate(runs):
        for stem in run.files:
            rank = (run.date or "", order)
            if stem not in chosen or rank >= chosen[stem][0]:
                chosen[stem] = (rank, run)
    return [(stem, chosen[stem][1]) for stem in sorted(chosen, key=sort_key)]
