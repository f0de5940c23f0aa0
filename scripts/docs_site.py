"""How ``make docs`` builds the site (``mkdocs.yml``): mkdocs hooks, and a griffe extension.

* :func:`on_files` (a mkdocs hook): the pages are the repository's own Markdown files at their
  own paths (``README.md`` as the home page, ``docs/*.md``, ``CHANGELOG.md``,
  ``benches/RESULTS.md``), so that the links between them, written for GitHub, work as they
  are; and one generated page per group of :data:`REFERENCE`, where mkdocstrings renders the
  modules' docstrings (``::: module``).
* :class:`ReSTDocstrings` (a griffe extension, named in ``mkdocs.yml``): the docstrings are
  written for doctest and reST (``>>>`` examples, ``:func:`x``` roles); it turns them into the
  Markdown mkdocstrings renders: the examples into ``pycon`` blocks, the roles into code.

Nothing here is imported by packread or its tests.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]

#: The guides: the repository's Markdown pages the site shows, by their paths.
GUIDES = ["README.md", "CHANGELOG.md", "benches/RESULTS.md"]

#: The API reference: a generated page per title, rendering these modules in turn.
REFERENCE = {
    "reference/packread.md": ("packread", ["packread"]),
    "reference/packread.torch.md": ("packread.torch", ["packread.torch"]),
    "reference/packread.ray.md": (
        "packread.ray and packread.dask",
        ["packread.ray", "packread.dask"],
    ),
    "reference/packread.cli.md": (
        "packread.cli",
        [
            "packread.cli",
            "packread.cli.inspect",
            "packread.cli.convert",
            "packread.cli.bench",
        ],
    ),
}


def reference_page(title: str, modules: list[str]) -> str:
    """The Markdown of one reference page: the title, then each module, its members under it."""
    parts = [f"# `{title}`\n"]
    for module in modules:
        if module == title:
            parts.append(f"::: {module}\n    options:\n      show_root_heading: false\n")
        else:
            parts.append(f"::: {module}\n")
    return "\n".join(parts)


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """The site's files: the theme's, the guides at their paths, the reference pages."""
    pages = [*GUIDES, *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
    out = [f for f in files if not f.is_documentation_page()]  # the theme's assets
    out += [File.generated(config, p, abs_src_path=str(ROOT / p)) for p in pages]
    out += [
        File.generated(config, uri, content=reference_page(title, modules))
        for uri, (title, modules) in REFERENCE.items()
    ]
    return Files(out)


# -- the docstrings ----------------------------------------------------------------------------

#: A reST role (``:func:`~packread.open```): its target, with ``~`` to show the last part only.
ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


def _role(m: re.Match[str]) -> str:
    target = m.group("target")
    if m.group("tilde"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def to_markdown(text: str) -> str:
    """A docstring's reST as Markdown: each run of doctest lines (``>>>`` and ``...``, with
    the output under them, up to a blank line) in a ``pycon`` block at its indentation, and
    roles as code (outside those blocks)."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(ROLE.sub(_role, line))
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


#: The docstrings of builtin types, which inspecting the extension gives the attributes that
#: hold one (``__version__``, a ``str``): not theirs.
BUILTIN_DOCS = {inspect.cleandoc(t.__doc__ or "") for t in (str, int, float, bytes, tuple, dict)}


class ReSTDocstrings(griffe.Extension):
    """Turns every docstring griffe loads into Markdown (:func:`to_markdown`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        if obj.is_attribute and inspect.cleandoc(obj.docstring.value) in BUILTIN_DOCS:
            obj.docstring = None
            return
        obj.docstring.value = to_markdown(obj.docstring.value)
