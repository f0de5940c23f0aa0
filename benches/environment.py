"""What the benchmark scripts (``bench_*.py``) say about the Python environment they ran in:
whether a peer imports, and the versions of the packages they compare."""

from __future__ import annotations

from collections.abc import Iterable


def missing(module: str) -> str | None:
    """Why ``module`` does not import here (``None``: it does)."""
    try:
        __import__(module)
    except Exception as e:
        return f"{module}: {type(e).__name__}: {e}"
    return None


def versions(packages: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{name: version}`` of each ``(name, module)``, ``"not installed"`` where it does not
    import."""
    out = {}
    for name, module in packages:
        try:
            out[name] = str(__import__(module, fromlist=["_"]).__version__)
        except Exception:
            out[name] = "not installed"
    return out
