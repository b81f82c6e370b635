"""Which Debian packages (and versions) the files of a tree came from, for the build manifest.

The answer is what a security update is checked against: ``cnichain version --verbose`` prints
it, and a rebuild on an updated build host picks up whatever ``apt-get upgrade`` brought in.
"""

from __future__ import annotations

import subprocess


def _variants(path: str) -> list[str]:
    """``path`` and its other spelling across Debian's merged /usr (dpkg knows only one of them)."""
    out = [path]
    for a, b in (("/usr/lib/", "/lib/"), ("/lib/", "/usr/lib/"), ("/usr/lib64/", "/lib64/"), ("/lib64/", "/usr/lib64/"),
                 ("/usr/bin/", "/bin/"), ("/bin/", "/usr/bin/")):
        if path.startswith(a):
            out.append(b + path[len(a):])
    return out


def owners(paths: list[str]) -> dict[str, str]:
    """host path -> owning package (``name`` or ``name:arch``) for every path dpkg knows."""
    wanted: dict[str, str] = {}
    for p in paths:
        for v in _variants(p):
            wanted.setdefault(v, p)
    found: dict[str, str] = {}
    names = sorted(wanted)
    for i in range(0, len(names), 2000):  # bounded argv per call
        out = subprocess.run(["dpkg-query", "-S", *names[i:i + 2000]], capture_output=True, text=True, timeout=300)
        for line in out.stdout.splitlines():
            if line.startswith("diversion ") or ": " not in line:
                continue
            pkgs, _, path = line.partition(": ")
            original = wanted.get(path.strip())
            if original is not None:
                found[original] = pkgs.split(",")[0].strip()
    return found


def versions(packages: set[str]) -> dict[str, str]:
    """package -> installed version (``dpkg-query -W``)."""
    if not packages:
        return {}
    out = subprocess.run(["dpkg-query", "-W", "-f=${binary:Package}\t${Version}\n", *sorted(packages)],
                         capture_output=True, text=True, timeout=120)
    result: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, _, version = line.partition("\t")
        if version:
            result[name] = version
    return result
