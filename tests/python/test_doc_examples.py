"""Every code example of the README and of docs/*.md runs, as written.

* **Python blocks** run page by page, in page order, in one namespace per page (a later block
  uses what an earlier one made, as a reader does), in a fresh copy of a folder holding the
  files they name, written by the writers users use (``support/doc_files.py``). What a
  training loop's examples leave to the reader is given: :data:`LOOP` (``idx``, ``epoch``,
  ``epochs``, ``step``, ``train_step``). A packread ``DeprecationWarning`` fails the example:
  the pages show the names of this release.
* **Shell blocks** (``sh``, ``console``) of ``packread`` commands run as
  ``python -m packread ...``, one block as one session in its own copy of those files, without
  the files its ``convert`` commands write; ``packread bench`` runs one round of two batches
  (``--rounds 1 --batches 2`` added: its flags are parsed and its batch reads run, not the full
  measurement) and without its DataLoader passes (``--no-loader``: ``test_cli_bench.py``
  runs those). In a ``console`` block, ``$ .venv/bin/python scripts/...`` runs in this
  process, from the repository, and prints what the page shows under it. Other shell blocks
  (``make``, ``pip install``) set a machine up and are not run here.
* An example that cannot run here says why on the line above its fence,
  ``<!-- example: skip (needs an S3 bucket) -->``; a marker without a reason, or not above a
  fence, fails, and so do more than :data:`MAX_SKIPS` markers in all.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from packread.cli import _parser
from support import doc_files
from support.markdown import Block, blocks, without_fences

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = ("python", "py")
SHELL = ("sh", "shell", "bash", "console")

#: The names the examples of a training loop use without making them.
LOOP: dict[str, Any] = {
    "idx": [5, 2, 7],  # a batch's sample indices (every file here has at least 8 samples)
    "epoch": 0,
    "epochs": 2,
    "step": 1,  # the training step within the epoch
    "train_step": lambda batch: None,
}

#: Examples that may be marked as not runnable here, in all the pages.
MAX_SKIPS = 4

INLINE_CODE = re.compile(r"`[^`\n]*`")
MARKER = re.compile(r"<!--\s*example:(?P<what>.*?)-->", re.S)
SKIP = re.compile(r"\s*skip\s*\((?P<reason>[^()]*[^()\s][^()]*)\)\s*")

#: What packread's deprecation warnings say (``_deprecated.warn``).
DEPRECATED = r".*it will be removed in the next release"


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def skip_reason(block: Block) -> str | None:
    """Why ``block`` is not run: its marker's reason (``""`` for a marker that gives none,
    which :func:`test_skip_markers_say_why_and_are_few` refuses), or ``None`` to run it."""
    m = MARKER.fullmatch(block.above)
    if m is None:
        return None
    skip = SKIP.fullmatch(m.group("what"))
    return skip.group("reason").strip() if skip else ""


def runnable(page: Path, langs: tuple[str, ...]) -> list[Block]:
    return [
        b
        for b in blocks(page.read_text(encoding="utf-8"))
        if b.lang in langs and skip_reason(b) is None
    ]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("doc-files")
    doc_files.write(root)
    return root


# -- the markers -----------------------------------------------------------------------------


def markers(text: str, label: str) -> tuple[list[str], list[str]]:
    """The markers of a page (``label``): those that skip a block, with why, and what is
    wrong with the others."""
    skipped, errors = [], []
    # The line above each fence (a block's code starts two lines below it).
    above = {b.line - 2: b for b in blocks(text)}
    # Markers are looked for outside code (where a page may show one), line numbers kept.
    prose = INLINE_CODE.sub(lambda c: " " * len(c.group(0)), without_fences(text))
    for m in MARKER.finditer(prose):
        line = prose.count("\n", 0, m.start()) + 1
        block = above.get(line)
        if block is None or block.above != m.group(0):
            errors.append(f"{label}:{line}: the marker is not alone on the line above a fence")
        elif not skip_reason(block):
            errors.append(f"{label}:{line}: say why: <!-- example: skip (why) -->")
        else:
            skipped.append(f"{label}:{line}: {skip_reason(block)}")
    return skipped, errors


def test_skip_markers_say_why_and_are_few():
    skipped, errors = [], []
    for page in PAGES:
        s, e = markers(page.read_text(encoding="utf-8"), rel(page))
        skipped += s
        errors += e
    assert errors == []
    assert len(skipped) <= MAX_SKIPS, skipped


def test_the_markers_are_read():
    # A checker that saw no marker, or took any, would let every page pass.
    page = (
        "x\n<!-- example: skip (needs a GPU) -->\n```python\nboom()\n```\n"
        "<!-- example: skip -->\n```sh\npackread nope\n```\n"
        "<!-- example: skip (stray) -->\n\n```sh\npackread inspect x\n```\n"
    )
    assert [skip_reason(b) for b in blocks(page)] == ["needs a GPU", "", None]
    skipped, errors = markers(page, "p.md")
    assert skipped == ["p.md:2: needs a GPU"]
    assert errors == [
        "p.md:6: say why: <!-- example: skip (why) -->",
        "p.md:10: the marker is not alone on the line above a fence",
    ]


# -- Python ----------------------------------------------------------------------------------


PYTHON_PAGES = [p for p in PAGES if runnable(p, PYTHON)]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=rel)
def test_python_examples_run(page, files, tmp_path, monkeypatch):
    shutil.copytree(files, tmp_path / "files")
    monkeypatch.chdir(tmp_path / "files")
    namespace: dict[str, Any] = {"__name__": "__doc_example__", **LOOP}
    for block in runnable(page, PYTHON):
        # Padded so that a traceback's line numbers are the page's.
        code = compile("\n" * (block.line - 1) + block.body, rel(page), "exec")
        with warnings.catch_warnings():
            warnings.filterwarnings("error", DEPRECATED, DeprecationWarning)
            exec(code, namespace)


def test_python_examples_are_found():
    assert len(runnable(ROOT / "README.md", PYTHON)) >= 5
    assert sum(len(runnable(p, PYTHON)) for p in PAGES) >= 20


# -- shell -----------------------------------------------------------------------------------


def commands(block: Block) -> list[tuple[list[str], str | None]]:
    """A shell block's commands, each with the output a ``console`` block shows under it
    (``None`` in an ``sh`` block)."""
    out: list[tuple[list[str], str | None]] = []
    shown: list[str] = []
    for line in block.body.splitlines():
        if block.lang == "console" and not line.startswith("$ "):
            shown.append(line)
            continue
        if out and block.lang == "console":
            out[-1] = (out[-1][0], "\n".join(shown).strip())
        shown = []
        argv = shlex.split(line.removeprefix("$ "), comments=True)
        if argv:
            out.append((argv, None))
    if out and block.lang == "console":
        out[-1] = (out[-1][0], "\n".join(shown).strip())
    return out


def is_packread(argv: list[str]) -> bool:
    return argv[0] == "packread"


def is_script(argv: list[str]) -> bool:
    return argv[0] == ".venv/bin/python" and argv[1].startswith("scripts/")


SHELL_BLOCKS = [
    (page, block)
    for page in PAGES
    for block in runnable(page, SHELL)
    if any(is_packread(a) or is_script(a) for a, _ in commands(block))
]


@pytest.mark.parametrize(
    ("page", "block"), SHELL_BLOCKS, ids=[f"{rel(p)}:{b.line}" for p, b in SHELL_BLOCKS]
)
def test_shell_examples_run(page, block, files, tmp_path, monkeypatch):
    where = tmp_path / "files"
    shutil.copytree(files, where)
    steps = commands(block)
    for argv, _ in steps:
        assert is_packread(argv) or is_script(argv), (
            f"{rel(page)}:{block.line}: {shlex.join(argv)} is not a packread command: give it "
            "a block of its own"
        )
        if is_packread(argv) and argv[1] == "convert":
            # The session starts before the files it writes exist.
            (where / _parser().parse_args(argv[1:]).dst).unlink(missing_ok=True)
    for argv, shown in steps:
        if is_packread(argv):
            run = [sys.executable, "-m", "packread", *argv[1:]]
            if argv[1] == "bench":
                run += ["--rounds", "1", "--batches", "2", "--no-loader"]
            proc = subprocess.run(run, cwd=where, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"{shlex.join(argv)}:\n{proc.stdout}\n{proc.stderr}"
            printed = proc.stdout
        else:
            printed = run_script(argv[1:], monkeypatch)
        if shown is not None:
            assert printed.strip() == shown, shlex.join(argv)


def run_script(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``python SCRIPT ARGS...`` prints, run here (the modules it imports are imported
    already) from the repository."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", argv)
    out = io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(ROOT / argv[0]), run_name="__main__")
        except SystemExit as e:
            code = e.code
    assert code in (0, None), out.getvalue()
    return out.getvalue()


def test_shell_examples_are_found():
    pages = {p.name for p, _ in SHELL_BLOCKS}
    assert {"README.md", "cli.md", "api.md"} <= pages
