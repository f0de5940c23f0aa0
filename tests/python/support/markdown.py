"""The fenced code blocks of the README and of the pages under docs/, as the page tests read
them (`test_readme.py`: links and keywords; `test_doc_examples.py`: running them)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

#: A fenced block (indented too, inside a list item), its language and its text.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)


@dataclass
class Block:
    """One fenced block of a page."""

    #: Its language, in lower case (``""`` for none).
    lang: str
    #: The line number of its first line of code (1-based).
    line: int
    #: Its code, dedented.
    body: str
    #: The line just above its opening fence (where a ``<!-- example: ... -->`` marker goes).
    above: str


def blocks(text: str) -> Iterator[Block]:
    """The fenced blocks of ``text``, in page order."""
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("body")) + 1
        start = text.rfind("\n", 0, m.start())  # the newline that ends the line above
        above = text[text.rfind("\n", 0, start) + 1 : start] if start > 0 else ""
        yield Block(
            m.group("lang").strip().lower(),
            line,
            textwrap.dedent(m.group("body")),
            above.strip(),
        )


def code_blocks(text: str) -> Iterator[tuple[str, int, str]]:
    """``(language, first line number, text)`` of each fenced block, dedented."""
    for b in blocks(text):
        yield b.lang, b.line, b.body


def without_fences(text: str) -> str:
    """``text`` with its fenced blocks blanked (line numbers kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
