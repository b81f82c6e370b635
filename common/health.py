"""STATUS checks: the node-level faults that break every ADD until an operator acts.

containerd 2.1+ runs STATUS on every plugin of the chain on every CRI Status poll (about every
5 s, no timeout) and turns the node NotReady on any failure, which evicts every pod.  So a STATUS
handler fails only for a fault no pod could be networked past and that only an operator can fix:
a state directory that cannot be written or created, a kernel facility the plugin needs that is
unusable, a delegated plugin missing from ``CNI_PATH``.  Pool exhaustion or one bad pod are *not*
such faults: they fail that pod's ADD, nothing else.

All checks are cheap (a few syscalls, no locks held, nothing written that outlives the call) and
read only the config keys they need, leniently: a key STATUS does not use can never fail it.
Every fault is code 50 ("plugin not available"): none of them takes anything away from pods that
already run, which is what 51 would announce.  Messages name the fault and what to fix.
"""

from __future__ import annotations

import os

from .errors import CniError, Code
from .invoke import find_plugin

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional


def not_available(plugin: str, fault: str, fix: str) -> CniError:
    """Code 50 with ``<plugin>: <fault>; <fix>``."""
    return CniError(Code.NOT_AVAILABLE, f"{plugin}: {fault}; {fix}")


def conf_str(conf: Any, *keys: str) -> str:
    """``conf[k1][k2]...`` when every level is an object and the leaf a string, else ``""``."""
    value = conf
    for key in keys:
        if not isinstance(value, dict):
            return ""
        value = value.get(key)
    return value if isinstance(value, str) else ""


def conf_true(conf: Any, key: str) -> bool:
    """``conf[key]`` is JSON ``true`` (anything else, including a bad type, counts as off)."""
    return isinstance(conf, dict) and conf.get(key) is True


def unwritable_reason(path: str, probe_name: str) -> Optional[str]:
    """Why ADD could not create files in directory ``path`` (None: it can).

    An existing directory is probed by creating and removing ``probe_name`` in it (what ADD does
    first); a missing one by checking that its nearest existing ancestor is a writable directory
    (ADD creates the rest), without creating anything.
    """
    existing = path
    while not os.path.isdir(existing):
        if os.path.lexists(existing):
            return f"{existing} is not a directory"
        parent = os.path.dirname(existing)
        if parent == existing:
            return f"{path} has no existing ancestor"
        existing = parent
    if existing != path:
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{path} cannot be created: {existing} is not writable"
        return None
    probe = os.path.join(path, probe_name)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return None  # another STATUS of ours is probing right now: the directory takes files
    except OSError as exc:
        return f"{path} is not writable ({exc.strerror})"
    os.close(fd)
    try:
        os.unlink(probe)
    except FileNotFoundError:
        pass  # an ADD holding the store's lock swept it (temporary prefix): removal works
    except OSError as exc:
        return f"{path} does not let files be removed ({exc.strerror})"
    return None


def require_delegate(plugin: str, delegate_type: str, paths: list[str]) -> str:
    """The delegate's executable on ``paths``, or a code-50 error saying where it is missing."""
    try:
        return find_plugin(delegate_type, paths)
    except CniError as exc:
        raise not_available(plugin, exc.msg, f'install "{delegate_type}" into one of the runtime\'s CNI bin '
                            "directories (cnichain install does) or fix the config's plugin type") from None
