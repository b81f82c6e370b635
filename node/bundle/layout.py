"""Where things live in a self-contained runtime tree, for the builder and the node installer alike.

A tree is built for one install prefix (default ``/opt/cni``) because the interpreter's ELF
interpreter (PT_INTERP) and library search path (DT_RPATH) are absolute paths into the tree:

    <prefix>/cnichain/versions/<tree-id>/   the tree (bin/python3, lib/, lib/python3.11/...)
    <prefix>/cnichain/current               symlink -> versions/<tree-id>, switched by rename
    <prefix>/bin/<type>                     one launcher per plugin type

Launchers name ``current/bin/python3`` in their shebang, so an upgrade never rewrites them: it
stages a new version directory beside the old one and renames one symlink.  A process already
running keeps the files of its own version (the previous version is kept on disk for that reason).
"""

from __future__ import annotations

import os
import re

PYTHON_VERSION = "3.11"
DEFAULT_PREFIX = "/opt/cni"
MANIFEST_REL = "share/cnichain/manifest.json"
SITE_REL = f"lib/python{PYTHON_VERSION}/site-packages"
STDLIB_REL = f"lib/python{PYTHON_VERSION}"
PYTHON_REL = "bin/python3"
CLI_REL = "bin/cnichain"
# The kernel truncates a shebang line beyond this many bytes on older kernels (BINPRM_BUF_SIZE).
MAX_SHEBANG = 127
_SAFE_PATH = re.compile(r"^(/[A-Za-z0-9._+-]+)+$")


class LayoutError(ValueError):
    """A prefix or path that cannot be used for a tree."""


def check_abs_path(path: str, what: str = "path") -> str:
    """Return ``path`` if it is absolute, normalised and free of '..', shell metacharacters and spaces.

    Every path that ends up in a shebang, PT_INTERP or a manifest passes through here first, so a
    tree never embeds a path the kernel or a runtime would read differently.
    """
    if not isinstance(path, str) or not _SAFE_PATH.fullmatch(path):
        raise LayoutError(f"{what} {path!r}: expected an absolute path of [A-Za-z0-9._+-] segments")
    if os.path.normpath(path) != path or any(seg in (".", "..") for seg in path.split("/")):
        raise LayoutError(f"{what} {path!r}: not normalised")
    return path


def home(prefix: str) -> str:
    """``<prefix>/cnichain``: everything of ours except the launchers."""
    return check_abs_path(prefix, "prefix") + "/cnichain"


def versions_dir(prefix: str) -> str:
    return home(prefix) + "/versions"


def version_dir(prefix: str, tree_id: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{16}", tree_id):
        raise LayoutError(f"tree id {tree_id!r}: expected 16 hex digits")
    return versions_dir(prefix) + "/" + tree_id


def current_link(prefix: str) -> str:
    return home(prefix) + "/current"


def bin_dir(prefix: str) -> str:
    return check_abs_path(prefix, "prefix") + "/bin"


def launcher_python(prefix: str) -> str:
    """The interpreter path a launcher's shebang names (through ``current``)."""
    return current_link(prefix) + "/" + PYTHON_REL


def loader_name() -> str:
    """glibc's loader file name for this architecture (x86-64 only for now)."""
    return "ld-linux-x86-64.so.2"


def under(root: str, host_path: str) -> str:
    """``host_path`` as seen from a process whose view of the host is mounted at ``root``.

    ``root`` "/" is the host itself.  ``host_path`` must pass :func:`check_abs_path`.
    """
    check_abs_path(host_path)
    if root in ("", "/"):
        return host_path
    return os.path.join(os.path.abspath(root), host_path.lstrip("/"))
