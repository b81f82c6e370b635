"""ELF questions and edits: which shared libraries a file needs, and re-pointing the interpreter.

Dependencies are listed by running the host's own glibc loader with ``--list`` (what ``ldd``
does, minus the shell script around it), so the answer is exactly what the loader would map.
Edits go through ``patchelf`` (Debian package).  All commands are argv lists.
"""

from __future__ import annotations

import os
import re
import subprocess

_LINE = re.compile(r"^\s*(\S+)(?:\s+=>\s+(\S+))?\s+\(0x[0-9a-f]+\)\s*$")


class ElfError(RuntimeError):
    """A tool failed or a library could not be found on the build host."""


def interpreter_of(path: str) -> str:
    """PT_INTERP of an executable (e.g. /lib64/ld-linux-x86-64.so.2)."""
    out = subprocess.run(["patchelf", "--print-interpreter", path], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ElfError(f"patchelf --print-interpreter {path}: {out.stderr.strip()}")
    return out.stdout.strip()


def needed_libraries(loader: str, path: str) -> dict[str, str]:
    """soname -> resolved host path for every library the loader would map for ``path``.

    The loader itself is left out (the caller carries it separately); so is the vDSO.
    """
    out = subprocess.run([loader, "--list", path], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ElfError(f"{loader} --list {path}: {out.stderr.strip() or out.stdout.strip()}")
    found: dict[str, str] = {}
    for line in out.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            if "not found" in line:
                raise ElfError(f"{path}: {line.strip()}")
            continue
        name, target = m.group(1), m.group(2)
        if target is None:  # the loader itself, or linux-vdso
            continue
        found[name] = os.path.realpath(target)
    return found


def find_library(soname: str, dirs: list[str]) -> str:
    """The host file for ``soname`` in the first of ``dirs`` that has it (no ldconfig, no gcc)."""
    for d in dirs:
        candidate = os.path.join(d, soname)
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    raise ElfError(f"{soname} not found in {', '.join(dirs)}")


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def patch_interpreter(path: str, interpreter: str, rpath: str) -> None:
    """Set PT_INTERP and DT_RPATH (not RUNPATH) of ``path``.

    DT_RPATH because the nftables binding dlopens ``libnftables.so.1`` by bare name: only the
    executable's DT_RPATH is searched for such a dlopen from another object; DT_RUNPATH is not.
    """
    argv = ["patchelf", "--set-interpreter", interpreter, "--force-rpath", "--set-rpath", rpath, path]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise ElfError(f"patchelf on {path}: {out.stderr.strip()}")
    if interpreter_of(path) != interpreter:
        raise ElfError(f"patchelf left {path} with another interpreter")
