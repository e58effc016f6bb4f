"""The files of docs/writing-a-backend.md's tutorial backend, read from the page itself.

The page shows every file of the package as one fenced code block whose first line names it: ``# file: PATH``
(Python, TOML), ``// file: PATH`` (JSON, which has no comments) or ``<!-- file: PATH -->`` (Markdown). That
line is the label, not part of the file. Blocks without it are illustrations and are not written anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

#: The first line of a block that is a file of the tutorial package.
LABEL = re.compile(r"^(?:#|//|<!--)\s*file:\s*(?P<path>[\w./-]+?)\s*(?:-->)?$")

FENCE = "```"


def fenced_blocks(text: str) -> list[str]:
    """The contents of the page's fenced code blocks (fences at the start of a line), in order."""
    blocks, current = [], None
    for line in text.splitlines(keepends=True):
        if line.startswith(FENCE):
            if current is None:
                current = []
            else:
                blocks.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        raise ValueError("the page ends inside a code block")
    return blocks


def page_files(text: str) -> dict[str, str]:
    """Path (relative to the package's root) -> content of every labelled block; a path given twice is an
    error, so that the page cannot show two versions of one file."""
    files: dict[str, str] = {}
    for block in fenced_blocks(text):
        first, _, rest = block.partition("\n")
        label = LABEL.match(first.strip())
        if label is None:
            continue
        path = label.group("path")
        if path in files or path.startswith("/") or ".." in Path(path).parts:
            raise ValueError(f"the page labels a block {path!r} twice, or outside the package")
        files[path] = rest
    return files


def write_files(files: dict[str, str], root: Path) -> None:
    """Write ``files`` under ``root``, folders made as needed."""
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
