"""Plain typed records without ``dataclasses``: the one mechanism every exec-path module uses.

Why not ``@dataclass``: importing ``dataclasses`` pulls in ``inspect`` (and with it ``ast``,
``dis``, ``tokenize``...), measured at 6-9 ms on this project's 2-core nodes, and ``typing`` adds
another ~3 ms.  A lean plugin (host-local, tuning's sysctls) does its real work in well under a
millisecond, so those imports were most of its exec time above the bare interpreter.

A record class lists its fields once, in ``_fields`` (usually also its ``__slots__``), and writes
an ordinary ``__init__`` with typed parameters and defaults.  :class:`Record` then gives
field-wise ``==`` (same class only) and a dataclass-like ``repr``; like a non-frozen dataclass it
is mutable and unhashable.  :class:`FrozenRecord` is the ``frozen=True`` counterpart: its
``__init__`` stores the fields by name with :meth:`FrozenRecord._assign`, any later assignment or
deletion raises ``AttributeError``, and it hashes by its fields.  Each field is also annotated in
the class body, so a type checker sees it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs milliseconds on every exec
    from typing import Any


class Record:
    """Field-wise ``==`` and ``repr`` over ``_fields``; mutable and unhashable."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as a non-frozen dataclass

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({inner})"


class FrozenRecord(Record):
    """A :class:`Record` that cannot change after ``__init__`` and is hashable by its fields."""

    __slots__ = ()

    def _assign(self, **values: Any) -> None:
        """Store each field by name (for use in ``__init__`` only).

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

    def __hash__(self) -> int:  # type: ignore[override]  # frozen: hashable by its fields
        return hash(self._values())

    def __setstate__(self, state: Any) -> None:
        """Let ``copy``, ``deepcopy`` and ``pickle`` rebuild an instance despite ``__setattr__``."""
        parts = state if isinstance(state, tuple) else (state,)
        for part in parts:
            for name, value in (part or {}).items():
                object.__setattr__(self, name, value)
