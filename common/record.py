"""Plain typed records without ``dataclasses``: the one mechanism every exec-path module uses.

Why not ``@dataclass``: importing ``dataclasses`` pulls in ``inspect`` (and with it ``ast``,
``dis``, ``tokenize``...), measured at 6-9 ms on this project's 2-core nodes, and ``typing`` adds
another ~3 ms.  A lean plugin (host-local, tuning's sysctls) does its real work in well under a
millisecond, so those imports were most of its exec time above the bare interpreter.

A record class declares each field once, as an annotation in its body, with its default if it has
one (``mtu: int | None = None``)::

    class Range(FrozenRecord):
        subnet: Network
        gateway: IP

``__init_subclass__`` reads the class's own annotations (without evaluating them: they are strings
under ``from __future__ import annotations``) into ``_fields``, after the fields of its bases, and
the ``__init__`` every record inherits takes them by position or keyword, fills in the defaults, and
refuses a missing or unknown one with ``TypeError``.  ``typing.dataclass_transform`` tells the type
checker the same, so mypy verifies every constructor call; at run time it is a no-op stand-in, as
``typing`` itself costs milliseconds per exec.  Every annotation is a field, as for the checker,
except one annotated ``ClassVar``.  A class that writes its own ``__init__`` (to turn ``None`` into a
fresh list, say) keeps it; a mutable default (list, dict, set) is refused, as dataclasses do.

:class:`Record` gives field-wise ``==`` (same class only) and a dataclass-like ``repr``; like a
non-frozen dataclass it is mutable and unhashable.  :class:`FrozenRecord` is the ``frozen=True``
counterpart: any assignment or deletion after ``__init__`` raises ``AttributeError``, and it
hashes by its fields.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs milliseconds on every exec
    from typing import Any, dataclass_transform
else:
    def dataclass_transform(**_options: object) -> object:
        """Run-time stand-in for ``typing.dataclass_transform``, which only informs checkers."""
        return lambda cls: cls

_MUTABLE_DEFAULTS = (list, dict, set)


class RecordBase:
    """What both record kinds share: fields from annotations, field-wise ``==`` and ``repr``.

    Not used directly: a record is a :class:`Record` or a :class:`FrozenRecord`, two siblings (a
    checker refuses a frozen dataclass-like class under a mutable one).
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _defaults: dict[str, Any] = {}

    def __init_subclass__(cls) -> None:
        # On every exec path, once per record class: kept to a few dict operations.
        body = cls.__dict__
        if "_fields" in body:
            return  # declared by hand: __slots__ = _fields = (...) and an __init__ of its own
        own = [name for name, kind in body.get("__annotations__", {}).items()
               if not str(kind).startswith(("ClassVar", "typing.ClassVar"))]
        if not own:
            return  # no fields of its own: it keeps its base's
        defaults = cls._defaults.copy()
        for name in own:
            if name in body:
                value = body[name]
                if type(value) in _MUTABLE_DEFAULTS:
                    raise TypeError(f"{cls.__qualname__}.{name}: a mutable default would be shared; "
                                    "write an __init__ that makes a fresh one")
                defaults[name] = value
            else:
                defaults.pop(name, None)  # redeclared without a default
        inherited = cls._fields
        cls._fields = (*(f for f in inherited if f not in own), *own) if inherited else tuple(own)
        cls._defaults = defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Fields by position or name, defaults filled in (a class may write its own instead)."""
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__qualname__}: takes {len(fields)} fields, {len(args)} given")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name in values or name not in fields:
                why = "given twice" if name in values else "unknown field"
                raise TypeError(f"{type(self).__qualname__}: {why} {name!r}")
            values[name] = value
        if len(values) < len(fields):
            defaults = self._defaults
            missing = []
            for name in fields:
                if name not in values:
                    if name in defaults:
                        values[name] = defaults[name]
                    else:
                        missing.append(name)
            if missing:
                raise TypeError(f"{type(self).__qualname__}: missing fields {missing}")
        setter = object.__setattr__
        for name, value in values.items():
            setter(self, name, value)

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({inner})"


@dataclass_transform(eq_default=True)
class Record(RecordBase):
    """A mutable record: unhashable, as a non-frozen dataclass."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


@dataclass_transform(eq_default=True, frozen_default=True)
class FrozenRecord(RecordBase):
    """A :class:`Record` that cannot change after ``__init__`` and is hashable by its fields."""

    __slots__ = ()

    def _assign(self, **values: Any) -> None:
        """Store each field by name, for an ``__init__`` a class writes itself.

        Keywords, not positions: swapping two fields of the same type (``conditions_v4`` and
        ``conditions_v6``) would otherwise go unnoticed by both the type checker and the tests.
        """
        if values.keys() != set(self._fields):
            missing = sorted(set(self._fields) - values.keys())
            extra = sorted(values.keys() - set(self._fields))
            raise TypeError(f"{type(self).__qualname__}: missing fields {missing}, unknown fields {extra}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__qualname__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__qualname__} is immutable")

    def __hash__(self) -> int:  # frozen: hashable by its fields
        return hash(self._values())

    def __setstate__(self, state: Any) -> None:
        """Let ``copy``, ``deepcopy`` and ``pickle`` rebuild an instance despite ``__setattr__``."""
        parts = state if isinstance(state, tuple) else (state,)
        for part in parts:
            for name, value in (part or {}).items():
                object.__setattr__(self, name, value)
