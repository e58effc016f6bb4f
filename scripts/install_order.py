"""Print the repository's packages in an order pip can install them one by one: each after those it needs.

``./run.sh`` installs conv-core and every plugin as editable packages, one ``pip install -e`` each, so that a
failure names the package. pip cannot find an unpublished package (``conv-rdna``, which ``conv-cdna`` is built on)
anywhere but in the checkout, so a package must come after every package of this repository it depends on.
The order is read from each ``pyproject.toml``'s ``[project]`` name and dependencies, never from folder names:
a new plugin that builds on another needs no change here.

Usage: ``python scripts/install_order.py [ROOT]`` prints one folder per line, relative to ROOT (default: the
repository holding this script). Exit 1, naming the packages, if their dependencies form a cycle.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: run.sh installs tomli first
    import tomli as tomllib

#: Where the installable packages live, relative to the repository root.
PACKAGE_GLOBS = ("packages/*/pyproject.toml", "plugins/*/pyproject.toml")


def requirement_name(requirement: str) -> str:
    """The normalised project name a PEP 508 requirement asks for (``conv_rdna>=0.1; ...`` -> ``conv-rdna``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalise(match.group(1))


def normalise(name: str) -> str:
    """PEP 503's normal form: case and runs of ``-_.`` do not distinguish projects."""
    return re.sub(r"[-_.]+", "-", name).lower()


def local_packages(root: Path) -> dict[str, tuple[Path, set[str]]]:
    """Project name -> (its folder, the names it depends on), for every package of the repository."""
    found = {}
    for pattern in PACKAGE_GLOBS:
        for pyproject in sorted(root.glob(pattern)):
            project = tomllib.loads(pyproject.read_text())["project"]
            needs = {requirement_name(r) for r in project.get("dependencies", [])}
            found[normalise(project["name"])] = (pyproject.parent, needs)
    return found


def install_order(packages: dict[str, tuple[Path, set[str]]]) -> list[str]:
    """The names in an order where each comes after the local packages it needs; ties keep folder order."""
    order: list[str] = []
    pending = dict(packages)
    while pending:
        ready = [name for name, (_, needs) in pending.items() if not (needs & pending.keys()) - {name}]
        if not ready:
            raise ValueError(f"the dependencies of {', '.join(sorted(pending))} form a cycle")
        order.extend(ready)
        for name in ready:
            del pending[name]
    return order


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    packages = local_packages(root)
    try:
        order = install_order(packages)
    except ValueError as exc:
        print(f"install_order: {exc}", file=sys.stderr)
        return 1
    for name in order:
        print(packages[name][0].relative_to(root).as_posix())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
