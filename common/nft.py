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

from .errors import CniError, Code
from .kernel_errors import NftError

_nft: Any = None


def handle() -> Any:
    global _nft
    if _nft is None:
        try:
            import nftables
        except ImportError as exc:
            raise CniError(Code.NOT_AVAILABLE, "the nftables Python binding is not installed", str(exc)) from None
        _nft = nftables.Nftables()
        _nft.set_json_output(True)
        _nft.set_handle_output(True)
    return _nft


def apply(commands: list[dict], what: str) -> None:
    """Apply ``commands`` (libnftables JSON objects) in one transaction or raise."""
    if not commands:
        return
    rc, _out, err = handle().json_cmd({"nftables": commands})
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
