"""A backend's kernels as one registry: each kernel one entry, everything else derived from it.

Adding a kernel to a backend is adding a :class:`KernelEntry`: its name (the candidate id's kernel part), the
configuration family it takes, the directions and layouts it computes, ``applies`` (why it cannot run a
problem, or None), its plan builder, estimate and error factor. The backend's candidates
(:meth:`Registry.applicable`), compile jobs and sweep space (:meth:`Registry.families`) and its README's kernel
table (:meth:`Registry.markdown_table`, checked by the backend's tests) all read the registry, so no other list
of kernels exists to forget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..problem import DIRECTIONS, LAYOUTS, ConvProblem

#: ``applies(problem)``: why the kernel cannot run ``problem`` (a sentence), or None.
Applies = Callable[[ConvProblem], "str | None"]


def always(problem: ConvProblem) -> str | None:
    """``applies`` of a kernel that runs every problem its directions and layouts allow."""
    return None


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of a backend.

    ``plan(problem, entry, config, table)`` returns the backend's plan; ``estimate(problem, plan, table)`` its
    time in microseconds; ``error_factor(problem)`` its error bound relative to a direct convolution's (1.0 for
    direct summation; Winograd's transforms more); ``run``, when given, replaces the backend's usual way of
    running a plan (``run(problem, plan, *tensors, out=None)``).
    """

    name: str
    family: str
    directions: tuple[str, ...]
    summary: str
    plan: Callable
    estimate: Callable
    applies: Applies = always
    layouts: tuple[str, ...] = LAYOUTS
    error_factor: Callable[[ConvProblem], float] | None = None
    run: Callable | None = None
    #: applies a data gradient's epilogue (a transposed convolution's bias and activation); the backend tags its
    #: candidates ``transposed_epilogue``
    transposed_epilogue: bool = False

    def __post_init__(self) -> None:
        unknown = (set(self.directions) - set(DIRECTIONS)) | (set(self.layouts) - set(LAYOUTS))
        if unknown or not self.directions or not self.layouts:
            raise ValueError(f"kernel {self.name!r}: directions {self.directions} and layouts {self.layouts} must "
                             f"be non-empty subsets of {DIRECTIONS} and {LAYOUTS}")

    def issue(self, problem: ConvProblem) -> str | None:
        """Why this kernel cannot run ``problem``: its direction, its layout, or ``applies``'s reason."""
        if problem.direction not in self.directions:
            return f"computes {'/'.join(self.directions)}, not {problem.direction}"
        if problem.transposed_epilogue and not self.transposed_epilogue:
            return "applies no bias or activation to a data gradient (a transposed convolution's epilogue)"
        if problem.layout not in self.layouts:
            return f"takes {'/'.join(self.layouts)} tensors, not {problem.layout}"
        return self.applies(problem)

    def errors(self, problem: ConvProblem) -> float:
        """The candidate's error factor for ``problem``."""
        return 1.0 if self.error_factor is None else self.error_factor(problem)


class Registry:
    """A backend's kernels, in the order its candidates are offered."""

    def __init__(self, entries: Iterable[KernelEntry]) -> None:
        self._entries = tuple(entries)
        self._by_name = {e.name: e for e in self._entries}
        if len(self._by_name) != len(self._entries):
            names = [e.name for e in self._entries]
            raise ValueError(f"kernel names repeat: {sorted({n for n in names if names.count(n) > 1})}")

    def __iter__(self) -> Iterator[KernelEntry]:
        return iter(self._entries)

    def __getitem__(self, name: str) -> KernelEntry:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def families(self) -> tuple[str, ...]:
        """Every configuration family the kernels take, each once, in registry order."""
        return tuple(dict.fromkeys(e.family for e in self._entries))

    def family_of(self, name: str) -> str:
        return self._by_name[name].family

    def for_direction(self, direction: str) -> tuple[KernelEntry, ...]:
        return tuple(e for e in self._entries if direction in e.directions)

    def applicable(self, problem: ConvProblem) -> tuple[KernelEntry, ...]:
        """The kernels that can run ``problem``, in registry order."""
        return tuple(e for e in self._entries if e.issue(problem) is None)

    def issues(self, problem: ConvProblem) -> dict[str, str]:
        """Why each other kernel cannot run ``problem`` (kernel name -> reason): for ``explain`` and tests."""
        return {e.name: reason for e in self._entries if (reason := e.issue(problem)) is not None}

    def markdown_table(self) -> str:
        """The README's kernel table: name, directions, layouts and summary of every kernel."""
        short = {"channels_last": "NHWC", "channels_first": "NCHW"}
        rows = ["| kernel | directions | layouts | what it is |", "| --- | --- | --- | --- |"]
        for e in self._entries:
            layouts = ", ".join(short[layout] for layout in e.layouts)
            rows.append(f"| `{e.name}` | {', '.join(e.directions)} | {layouts} | {e.summary} |")
        return "\n".join(rows)


#: The markers between which a backend's README holds :meth:`Registry.markdown_table`.
README_BEGIN, README_END = "<!-- kernels: begin -->", "<!-- kernels: end -->"


def readme_table(readme: str) -> str:
    """The kernel table held between :data:`README_BEGIN` and :data:`README_END` in a README's text."""
    start, end = readme.index(README_BEGIN) + len(README_BEGIN), readme.index(README_END)
    return readme[start:end].strip()
