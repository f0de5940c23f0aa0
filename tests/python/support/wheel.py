"""What a built wheel is: its tags, the shared libraries and glibc symbol versions its extension
needs, the platform tag auditwheel gives it, its size and whether it carries debug info.

``make wheel`` prints this report (``python tests/python/support/wheel.py dist/*.whl``);
``tests/python/test_wheel.py`` asserts on the same facts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass

#: The extension module inside the wheel.
EXTENSION = "packread/_packread.abi3.so"

#: What a manylinux wheel may link against (PEP 600's policy, as auditwheel applies it).
SYSTEM_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
    }
)


def version_key(version: str) -> tuple[int, ...]:
    """``"2.3.4"`` -> ``(2, 3, 4)``, for ordering glibc versions."""
    return tuple(int(p) for p in version.split("."))


@dataclass(frozen=True)
class WheelFacts:
    name: str
    #: Bytes of the wheel file, and of the extension module unpacked.
    size: int
    extension_size: int
    #: The ``Tag:`` lines of the wheel's WHEEL file.
    tags: tuple[str, ...]
    #: The extension's DT_NEEDED entries.
    needed: frozenset[str]
    #: Every ``GLIBC_x.y`` version its dynamic symbols reference, oldest first.
    glibc: tuple[str, ...]
    #: The dynamic symbols that reference the newest of those versions.
    newest_symbols: tuple[str, ...]
    #: Section names with debug information (``.debug_*``, ``.zdebug_*``).
    debug_sections: tuple[str, ...]
    #: ``auditwheel show``'s verdict: the platform tag the wheel is consistent with, and the
    #: whole text.
    audit_tag: str | None
    audit_text: str

    @property
    def newest_glibc(self) -> str:
        return self.glibc[-1] if self.glibc else "none"


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def inspect(wheel: str) -> WheelFacts:
    """Unpacks ``wheel``'s extension and reads it with readelf, objdump and auditwheel."""
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = tuple(
            line.split(":", 1)[1].strip()
            for line in z.read(meta).decode().splitlines()
            if line.startswith("Tag:")
        )
        so = z.extract(EXTENSION, tmp)
        dynamic = _run("readelf", "-d", "-W", so)
        sections = _run("readelf", "-S", "-W", so)
        symbols = _run("objdump", "-T", so)
        extension_size = os.path.getsize(so)
    needed = frozenset(
        line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line
    )
    by_version: dict[str, list[str]] = {}
    for line in symbols.splitlines():
        m = re.search(r"\bGLIBC_([0-9.]+)\)?\s+(\S+)$", line)
        if m:
            by_version.setdefault(m.group(1), []).append(m.group(2))
    glibc = tuple(sorted(by_version, key=version_key))
    newest = tuple(sorted(by_version[glibc[-1]])) if glibc else ()
    debug = tuple(sorted(set(re.findall(r"\s(\.z?debug_\w+)", sections))))
    audit = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", wheel], capture_output=True, text=True
    )
    text = " ".join((audit.stdout + audit.stderr).split())
    m = re.search(r'is consistent with the following platform tag: "([^"]+)"', text)
    return WheelFacts(
        name=os.path.basename(wheel),
        size=os.path.getsize(wheel),
        extension_size=extension_size,
        tags=tags,
        needed=needed,
        glibc=glibc,
        newest_symbols=newest,
        debug_sections=debug,
        audit_tag=m.group(1) if m and audit.returncode == 0 else None,
        audit_text=text,
    )


def report(facts: WheelFacts) -> str:
    mib = 1 << 20
    newest = ", ".join(facts.newest_symbols[:6])
    more = len(facts.newest_symbols) - 6
    if more > 0:
        newest += f", ... ({more} more)"
    return "\n".join(
        [
            f"wheel:            {facts.name}",
            f"size:             {facts.size / mib:.1f} MiB "
            f"(extension {facts.extension_size / mib:.1f} MiB unpacked)",
            f"debug info:       {', '.join(facts.debug_sections) or 'none'}",
            f"tags:             {', '.join(facts.tags)}",
            f"auditwheel:       {facts.audit_tag or 'NOT a manylinux wheel: ' + facts.audit_text}",
            f"needs:            {', '.join(sorted(facts.needed))}",
            f"newest GLIBC:     {facts.newest_glibc} ({newest})",
        ]
    )


def main(argv: list[str]) -> int:
    for wheel in argv:
        print(report(inspect(wheel)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
