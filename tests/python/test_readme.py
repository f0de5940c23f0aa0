"""The README and the pages under docs/ say what the code does: the README is a short guide that
opens with the two commands the Makefile promises, every relative link leads to a file (and a
heading, where it names one), every keyword argument in their Python examples is a parameter of
the callable it is passed to (in the new vocabulary: a name kept only for compatibility does
not count), and docs/api.md's tables list the public signatures as they are."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from packread._deprecated import GROUPED, RENAMED
from packread._registry import formats
from support.markdown import code_blocks, without_fences

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 200

#: How the README opens: its title, then the two commands (the Makefile's first lines say so).
README_OPENING = (
    "# packread\n"
    "\n"
    "```sh\n"
    "make demo   # set up, then a DataLoader epoch per format: packread beside the seeds' own"
    " Datasets\n"
    "make test   # set up if needed, then Rust tests, pytest, the lints and the wheel check"
    " (what CI runs)\n"
    "```\n"
)

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


#: The public callables: those the examples' keyword arguments are checked against, and those
#: docs/api.md has a table of parameters for.
PUBLIC = [
    "packread.open",
    "packread.HDF5Reader",
    "packread.ZipReader",
    "packread.TarReader",
    "packread.NpyReader",
    "packread.NpzReader",
    "packread.ImageReader",
    "packread.ClipReader",
    "packread.load_npy",
    "packread.load_npz",
    "packread.ImageDecode",
    "packread.Remote",
    "packread.Limits",
    "packread.torch.PackDataset",
    "packread.torch.PackMapDataset",
    "packread.torch.MixDataset",
    "packread.ray.read",
    "packread.dask.from_reader",
]


def resolve(qualname: str) -> Callable[..., Any]:
    module, _, name = qualname.rpartition(".")
    if module == "packread.torch":
        pytest.importorskip("torch")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def callables() -> dict[str, Callable[..., Any]]:
    """The public callables by the name a call to them ends with (``packread.open`` as
    ``open``)."""
    return {q.rpartition(".")[2]: resolve(q) for q in PUBLIC}


def named(func: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """``func``'s parameters but ``self`` and the catch-alls (``**deprecated`` included: the
    old names it takes are not the vocabulary)."""
    return {
        p.name: p
        for p in inspect.signature(func).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def reader_options() -> set[str]:
    """Every option some format's reader takes (what ``**options`` passes on)."""
    return {name for fmt in formats() for name in named(fmt.reader)} - {"source"}


def allowed_keywords(name: str, func: Callable[..., Any]) -> set[str]:
    """The keyword arguments a call to ``func`` may pass: its own parameters, and for the
    dispatcher and the datasets (whose ``**options`` go to a reader) the readers' too."""
    own = set(named(func))
    if name in ("open", "PackDataset", "PackMapDataset", "read"):
        own |= reader_options()
    return own


def links(path: Path) -> list[str]:
    """The link targets of a page, outside code."""
    return LINK.findall(INLINE_CODE.sub("", without_fences(path.read_text(encoding="utf-8"))))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated one numbered, as GitHub does)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in without_fences(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if m:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            found.add(base if k == 0 else f"{base}-{k}")
    return found


# -- the README ------------------------------------------------------------------------------


def test_readme_is_a_short_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_readme_opens_with_make_demo_and_make_test():
    text = README.read_text(encoding="utf-8")
    assert text.startswith(README_OPENING)
    first = next(code_blocks(text))
    assert first[0] == "sh"
    assert [line.split("#")[0].strip() for line in first[2].splitlines()] == [
        "make demo",
        "make test",
    ]


def test_readme_links_every_docs_page():
    linked = {
        (README.parent / target.split("#")[0]).resolve()
        for target in links(README)
        if not target.startswith(("http://", "https://", "#"))
    }
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert missing == []


# -- links -----------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_somewhere(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:...
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert broken == []


# -- keyword arguments in the examples -------------------------------------------------------


def calls(tree: ast.AST, known: dict[str, Callable[..., Any]]) -> Iterator[tuple[str, ast.Call]]:
    """The calls in ``tree`` to the checked callables: ``packread.open(...)`` (a bare
    ``open`` is the builtin), ``X(...)`` and ``anything.X(...)`` for the others."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute):
            name = f.attr
            if name == "open" and not (isinstance(f.value, ast.Name) and f.value.id == "packread"):
                continue
        elif isinstance(f, ast.Name) and f.id != "open":
            name = f.id
        else:
            continue
        if name in known:
            yield name, node


def example_errors(
    text: str, label: str, known: dict[str, Callable[..., Any]]
) -> tuple[list[str], int]:
    """What is wrong with the calls in the Python blocks of ``text`` (a page named ``label``),
    and how many calls were checked."""
    errors, checked = [], 0
    for lang, first_line, body in code_blocks(text):
        if lang not in ("python", "py"):
            continue
        try:
            tree = ast.parse(body)
        except SyntaxError:
            continue  # not a program (a doctest, a sketch): nothing to check
        for name, call in calls(tree, known):
            checked += 1
            func = known[name]
            where = f"{label}:{first_line + call.lineno - 1}: {name}()"
            allowed = allowed_keywords(name, func)
            for kw in call.keywords:
                if kw.arg is not None and kw.arg not in allowed:
                    errors.append(f"{where} has no parameter {kw.arg!r}")
            if any(isinstance(a, ast.Starred) for a in call.args):
                continue
            positional = [
                p
                for p in named(func).values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if len(call.args) > len(positional):
                errors.append(f"{where} takes {len(positional)} positional arguments")
            given = {p.name for p in positional[: len(call.args)]}
            for kw in call.keywords:
                if kw.arg in given:
                    errors.append(f"{where} gets {kw.arg!r} by position and by keyword")
    return errors, checked


def page_errors(page: Path) -> tuple[list[str], int]:
    return example_errors(
        page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)), callables()
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_keywords_are_parameters(page):
    errors, _ = page_errors(page)
    assert errors == []


def test_the_readme_examples_are_checked_at_all():
    # A parser that silently found nothing would pass every page.
    _, checked = page_errors(README)
    assert checked >= 15


def test_old_names_and_unknown_names_are_refused():
    text = (
        "```python\n"
        'r = packread.HDF5Reader("a.h5", datasets="x")  # an old name\n'
        'd = PackDataset("a", 4, size=8)  # an old name, passed on to a reader\n'
        'e = packread.ImageDecode(224, crop="random", sizes=3)  # no such name\n'
        'z = packread.ZipReader("a.zip", "*.raw")  # members is keyword-only\n'
        'ok = packread.open("a.h5", arrays="x", format="hdf5", remote={})\n'
        "```\n"
    )
    errors, checked = example_errors(text, "probe.md", callables())
    assert checked == 5
    assert len(errors) == 4, errors


# -- docs/api.md -----------------------------------------------------------------------------


def api_sections() -> dict[str, list[list[str]]]:
    """docs/api.md's tables of parameters: ``{heading: [row cells]}`` for each heading whose
    table's first column is ``parameter``."""
    out: dict[str, list[list[str]]] = {}
    heading, header = "", None
    for line in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("#").strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: ") or header[0] != "parameter":
            continue
        out.setdefault(heading, []).append(cells)
    return out


def _section(sections: dict[str, list[list[str]]], qualname: str) -> list[list[str]]:
    hits = [h for h in sections if re.search(rf"`{re.escape(qualname)}\b", h)]
    assert len(hits) == 1, f"docs/api.md: one table for {qualname}, found {hits}"
    return sections[hits[0]]


@pytest.mark.parametrize("qualname", PUBLIC)
def test_api_tables_list_every_parameter_with_its_default(qualname):
    func = resolve(qualname)
    rows = _section(api_sections(), qualname)
    documented: dict[str, str] = {}
    for cells in rows:
        for name in re.findall(r"`([A-Za-z_]\w*)`", cells[0]):
            if not cells[0].startswith("`**"):
                documented[name] = cells[-1]
    params = named(func)
    assert sorted(documented) == sorted(params)
    for name, p in params.items():
        want = "required" if p.default is p.empty else f"`{p.default!r}`"
        assert documented[name] == want, f"{qualname}({name}): {documented[name]} != {want}"


def test_api_lists_every_renamed_parameter():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = text.split("## Renamed parameters", 1)[1]
    old_column = " ".join(line.split("|")[1] for line in table.splitlines() if line.startswith("|"))
    missing = [old for old in [*RENAMED, *GROUPED] if f"`{old}=`" not in old_column]
    assert missing == []
