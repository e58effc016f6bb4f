"""Plain text tables: what ``conv-core explain`` prints at run time and the offline commands print too."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """Rows as aligned text columns under ``headers``.

    ``align`` holds one ``l`` or ``r`` per column (missing: ``l``); numbers read
    best right-aligned. Cells are ``str()``-ed; ``None`` prints as ``-``.
    """
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))

    def render(row: Sequence[str]) -> str:
        parts = []
        for i, text in enumerate(row):
            right = i < len(align) and align[i] == "r"
            parts.append(text.rjust(widths[i]) if right else text.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    lines = [render(list(headers)), render(["-" * w for w in widths])]
    lines.extend(render(row) for row in cells)
    return "\n".join(lines)
