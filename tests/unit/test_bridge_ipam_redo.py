"""bridge's IPAM ADD after a killed ADD: the attachment's own leftover reservation is released and
the address asked for again, as often as killed ADDs still in flight reserve again, and no more."""

from __future__ import annotations

import pytest

from cnichain.common.errors import DUPLICATE_ALLOCATION, CniError, plugin_error
from cnichain.common.types import Result
from cnichain.plugins.bridge import plugin as bridge


class Ipam:
    """A delegate that answers ADD with "duplicate" ``duplicates`` times, then with a result."""

    def __init__(self, duplicates: int) -> None:
        self.duplicates = duplicates
        self.calls: list[str] = []

    def __call__(self, req: object, command: str) -> Result:
        self.calls.append(command)
        if command == "ADD" and self.calls.count("ADD") <= self.duplicates:
            raise plugin_error(f"10.22.0.18 has been allocated to ctr, {DUPLICATE_ALLOCATION}")
        return Result(cni_version="1.0.0")


@pytest.mark.parametrize("duplicates", [0, 1, bridge.IPAM_REDOS])
def test_each_leftover_is_released_and_asked_again(monkeypatch, duplicates):
    ipam = Ipam(duplicates)
    monkeypatch.setattr(bridge, "delegate_ipam", ipam)
    assert bridge._ipam_add(object()) is not None  # type: ignore[arg-type]
    assert ipam.calls == ["ADD", "DEL"] * duplicates + ["ADD"]


def test_the_redo_is_bounded(monkeypatch):
    ipam = Ipam(bridge.IPAM_REDOS + 1)
    monkeypatch.setattr(bridge, "delegate_ipam", ipam)
    with pytest.raises(CniError, match="duplicate allocation"):
        bridge._ipam_add(object())  # type: ignore[arg-type]
    assert ipam.calls.count("DEL") == bridge.IPAM_REDOS


def test_any_other_refusal_stands(monkeypatch):
    def refuse(req: object, command: str) -> Result:
        raise plugin_error("no IP addresses available in range set: 10.22.0.0/24")
    monkeypatch.setattr(bridge, "delegate_ipam", refuse)
    with pytest.raises(CniError, match="no IP addresses available"):
        bridge._ipam_add(object())  # type: ignore[arg-type]
