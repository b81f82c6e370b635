"""The libnftables JSON API, through the distro's ``nftables`` Python binding.

The binding is imported on first use (it loads libnftables through ctypes, ~20 ms).  Every change
a plugin makes is sent as one JSON command list, which libnftables applies as one atomic
transaction: either all of it lands or none of it does.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

from . import kerneltime
from .errors import CniError, Code
from .kernel_errors import NftError

_nft: Any = None  # the context for the namespace below, made on first use there
_nft_netns: Any = None  # (device, inode) of the network namespace _nft was made in


def _thread_netns() -> tuple[int, int]:
    import os

    st = os.stat("/proc/thread-self/ns/net")
    return st.st_dev, st.st_ino


def handle() -> Any:
    """The libnftables context for the calling thread's network namespace.

    libnftables opens its netlink socket when the context is made, and a netlink socket stays bound
    to the namespace it was opened in: a context made in one namespace and used after entering
    another would read and write the first one's ruleset.  So the cached context is keyed by the
    namespace it was made in (one ``stat``), and a process that moves between namespaces -- the
    node agent's long-lived workers -- gets a fresh one wherever it is.
    """
    global _nft, _nft_netns
    where = _thread_netns()
    if _nft is None or _nft_netns != where:
        try:
            import nftables
        except ImportError as exc:
            raise CniError(Code.NOT_AVAILABLE, "the nftables Python binding is not installed", str(exc)) from None
        _nft = None  # the old context (and its socket) goes before the new one is made
        ctx = nftables.Nftables() if kerneltime.spans is None else _timed_context(nftables)
        ctx.set_json_output(True)
        ctx.set_handle_output(True)
        _nft, _nft_netns = ctx, where
    return _nft


def _timed_context(nftables: Any) -> Any:
    """A context whose commands are recorded (benchmarks only: :mod:`.kerneltime`)."""
    ctx = kerneltime.timed("nftables", nftables.Nftables)()
    ctx.cmd = kerneltime.timed("nftables", ctx.cmd)  # json_cmd runs through cmd
    return ctx


def reset() -> None:
    """Drop the cached context (and with it its netlink socket): what a process that served one
    request and will serve another in some other namespace does between them."""
    global _nft, _nft_netns
    _nft = _nft_netns = None


def apply(commands: list[dict], what: str) -> None:
    """Apply ``commands`` (libnftables JSON objects) in one transaction or raise."""
    if not commands:
        return
    rc, _out, err = handle().json_cmd({"nftables": commands})
    if rc != 0:
        raise NftError(what, str(err).strip())


def apply_text(script: str, what: str) -> None:
    """Apply an nft script (one transaction) or raise: only for what JSON cannot say, and only
    ever with text the caller wrote itself, never a value from a config or a request."""
    rc, _out, err = handle().cmd(script)
    if rc != 0:
        raise NftError(what, str(err).strip())


def list_ruleset(command: str) -> Optional[list[dict]]:
    """Run a ``list ...`` command; None when the object does not exist."""
    rc, out, err = handle().cmd(command)
    if rc != 0:
        text = str(err)
        if "No such file or directory" in text or "does not exist" in text:
            return None
        raise NftError(f"nft {command}", text.strip())
    if not out:
        return []
    data = json.loads(out) if isinstance(out, str) else out
    return list(data.get("nftables", []))


def unusable_reason(family: str) -> Optional[str]:
    """Why libnftables cannot work with the kernel here (None: it can), probed by listing the
    table names of ``family`` (names only: cheap however many rules and elements there are).
    Any failure (no binding, no nf_tables in the kernel, no permission) is the reason."""
    try:
        nft = handle()
    except CniError as exc:
        return exc.msg
    rc, _out, err = nft.cmd(f"list tables {family}")
    return None if rc == 0 else (str(err).strip() or f"rc {rc}")
