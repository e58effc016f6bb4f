"""Terminal output without dependencies: a one-line progress bar (text tables: :mod:`conv_core.text_table`).

``bench`` and ``tune`` can run for minutes; the bar tells the user which layer
is being measured without flooding a log. It writes to stderr only when stderr
is a terminal (or when forced), so piped output and captured test output stay
clean, and it redraws one line with ``\\r``.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO


class Progress:
    """A progress bar over ``total`` items: ``[####....] 3/8 layer3  4.1s`` (the bar fills as items finish).

    Call :meth:`step` when starting each item and :meth:`close` at the end (or
    use it as a context manager). ``mode``: ``"auto"`` draws only when the
    stream is a terminal, ``"always"`` draws anyway, ``"never"`` draws nothing.
    """

    WIDTH = 20

    def __init__(self, total: int, label: str = "", *, mode: str = "auto", stream: TextIO | None = None) -> None:
        if mode not in ("auto", "always", "never"):
            raise ValueError(f"progress mode {mode!r} is not one of auto, always, never")
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = mode == "always" or (mode == "auto" and _is_tty(self.stream))
        self.count = 0  # the item being worked on, from 1
        self.finished = False
        self._start = time.perf_counter()
        self._last_width = 0

    def step(self, item: str = "") -> None:
        """Start the next item (named ``item``) and redraw."""
        self.count = min(self.count + 1, self.total) if self.total else self.count + 1
        self._draw(item)

    def close(self) -> None:
        """Leave a final ``done`` line, so the next output starts on a fresh line."""
        self.finished = True
        if self.enabled and self._last_width:
            self._draw("done")
            self.stream.write("\n")
            self.stream.flush()
            self._last_width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self, item: str) -> str:
        """The text of the bar for the current count (without ``\\r``)."""
        completed = self.total if self.finished else max(self.count - 1, 0)
        done = self.WIDTH * completed // self.total if self.total else self.WIDTH
        bar = "#" * done + "." * (self.WIDTH - done)
        elapsed = time.perf_counter() - self._start
        prefix = f"{self.label} " if self.label else ""
        return f"{prefix}[{bar}] {self.count}/{self.total} {item}  {elapsed:.1f}s"

    def _draw(self, item: str) -> None:
        if not self.enabled:
            return
        columns = shutil.get_terminal_size((100, 20)).columns
        text = self.line(item)[: max(columns - 1, 10)]
        self.stream.write("\r" + text.ljust(self._last_width))
        self.stream.flush()
        self._last_width = len(text)


def progress_mode(progress: bool | str) -> str:
    """Map the ``progress`` argument of ``run_bench``/``run_tune`` to a :class:`Progress` mode.

    ``True`` means "when stderr is a terminal" (``auto``), ``False`` ``never``;
    a mode string passes through.
    """
    if progress is True:
        return "auto"
    if progress is False or progress is None:
        return "never"
    return str(progress)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
