"""``resolvConf``: turn a resolv.conf file into the result's ``dns`` block, as the reference does."""

from __future__ import annotations

from cnichain.common.kernel_errors import KernelError
from cnichain.common.types import DNS


def parse_resolv_conf(path: str) -> DNS:
    """``nameserver``/``domain``/``search``/``options`` lines; comments and short lines skipped."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        raise KernelError.of(exc, f"open {path}") from None
    dns = DNS()
    for line in text.split("\n"):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        fields = line.split()
        if len(fields) < 2:
            continue
        key = fields[0]
        if key == "nameserver":
            dns.nameservers.append(fields[1])
        elif key == "domain":
            dns.domain = fields[1]
        elif key == "search":
            dns.search.extend(fields[1:])
        elif key == "options":
            dns.options.extend(fields[1:])
    return dns
