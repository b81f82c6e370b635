"""common/record.py: the dataclass stand-in every exec-path module uses (==, repr, frozen, hash)."""

from __future__ import annotations

import copy
import pickle

import pytest

from cnichain.common.record import FrozenRecord, Record
from cnichain.common.skel import Plugin
from cnichain.plugins.host_local.config import load
from cnichain.plugins.portmap.config import PortMapping
from cnichain.plugins.route_override.plan import KernelRoute
from cnichain.plugins.tuning.config import TuningConfig


class Point(Record):
    x: int
    y: int = 0


class FPoint(FrozenRecord):
    x: int
    y: int = 0


class Other(FrozenRecord):
    x: int
    y: int = 0


def test_record_is_fieldwise_equal_mutable_and_unhashable():
    p = Point(1, 2)
    assert p == Point(1, 2) and p != Point(1, 3)
    assert repr(p) == "Point(x=1, y=2)"
    p.y = 5
    assert p == Point(1, 5)
    with pytest.raises(TypeError):
        hash(p)


def test_frozen_record_refuses_changes_and_hashes_by_fields():
    p = FPoint(1, 2)
    assert p == FPoint(1, 2) and hash(p) == hash(FPoint(1, 2)) and len({p, FPoint(1, 2), FPoint(2)}) == 2
    assert repr(p) == "FPoint(x=1, y=2)"
    with pytest.raises(AttributeError, match="immutable"):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del p.x  # type: ignore[misc]
    assert p.x == 1


def test_equality_needs_the_same_class():
    assert FPoint(1, 2) != Other(1, 2)
    assert FPoint(1, 2) != (1, 2)


def test_assign_needs_every_field_by_name():
    class Broken(FrozenRecord):
        a: int
        b: int

        def __init__(self, extra: bool) -> None:
            if extra:
                self._assign(a=1, b=2, c=3)
            else:
                self._assign(a=1)

    with pytest.raises(TypeError, match=r"missing fields \['b'\], unknown fields \[\]"):
        Broken(extra=False)
    with pytest.raises(TypeError, match=r"missing fields \[\], unknown fields \['c'\]"):
        Broken(extra=True)


def test_fields_come_from_the_annotations_in_order_after_the_bases():
    class Base(FrozenRecord):
        a: int
        b: str = "b"
        LIMIT: ClassVar[int] = 3  # noqa: F821 - never evaluated under postponed annotations

    class Child(Base):
        c: float = 1.0

    assert Base._fields == ("a", "b") and Child._fields == ("a", "b", "c")
    assert Child(1) == Child(a=1, b="b", c=1.0) and Child(1, "x", 2.0).c == 2.0
    assert repr(Child(1)).endswith("Child(a=1, b='b', c=1.0)")


def test_the_generated_init_refuses_what_a_dataclass_refuses():
    with pytest.raises(TypeError, match=r"missing fields \['x'\]"):
        FPoint()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown field 'z'"):
        FPoint(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="given twice 'x'"):
        FPoint(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="takes 2 fields, 3 given"):
        FPoint(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="mutable default"):
        class Shared(Record):
            items: list = []


def test_a_hand_written_init_is_kept():
    class Fresh(Record):
        items: list[int]

        def __init__(self, items: list[int] | None = None) -> None:
            self.items = [] if items is None else items

    assert Fresh._fields == ("items",) and Fresh().items == [] and Fresh().items is not Fresh().items


def test_frozen_records_copy_deepcopy_and_pickle():
    p = FPoint(1, [2, 3])
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert copy.deepcopy(p).y is not p.y
    assert pickle.loads(pickle.dumps(FPoint(1, 2))) == FPoint(1, 2)
    cfg = load({"cniVersion": "1.0.0", "name": "n", "ipam": {"subnet": "10.0.0.0/24"}})
    assert pickle.loads(pickle.dumps(cfg)) == cfg and hash(cfg) == hash(copy.deepcopy(cfg))


def test_plugin_configs_keep_dataclass_semantics():
    assert TuningConfig() == TuningConfig(sysctl=(), mac="", mtu=0)
    assert repr(PortMapping(80, 8080, "tcp")) == "PortMapping(host_port=80, container_port=8080, protocol='tcp', host_ip='')"
    with pytest.raises(AttributeError):
        PortMapping(80, 8080, "tcp").host_port = 1  # type: ignore[misc]
    # KernelRoute's netlink attributes are carried along but, as before, not compared or hashed.
    a, b = KernelRoute("10.0.0.0/8", attrs={"oif": 1}), KernelRoute("10.0.0.0/8", attrs={"oif": 2})
    assert a == b and hash(a) == hash(b) and "attrs={'oif': 1}" in repr(a)


def test_plugin_record_is_frozen_and_hashable():
    def handler(req):
        return None

    p = Plugin(name="x", add=handler, delete=handler)
    assert p == Plugin(name="x", add=handler, delete=handler) and hash(p) == hash(Plugin("x", handler, handler))
    with pytest.raises(AttributeError, match="cannot assign to field 'name': Plugin is immutable"):
        p.name = "y"  # type: ignore[misc]
