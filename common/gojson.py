"""Decoding plugin input the way Go's ``encoding/json`` fills the reference plugins' structs.

Why this exists: runtimes marshal what they send with Go, and the reference plugins decode it with
Go, so whatever Go's decoder accepts *is* the contract.  containerd's go-cni marshals capability
arguments from structs without json tags (``{"HostPort": 8080, "ContainerPort": 80, "HostIP": ""}``,
``{"IngressRate": ...}``, ``[[{"Subnet": ..., "RangeStart": ""}]]``), CRI-O and podman use camelCase,
and an operator may write either.  Every plugin therefore declares the shape of its input once, as
a :class:`Struct` schema, and :func:`decode` turns the raw JSON into a plain dict keyed by the
canonical (json tag) names, with Go's rules:

* **Keys match fields case-insensitively.**  For each key, an exact match with a field's json name
  is tried first, then a case-folded one; keys are applied in document order, so when two spellings
  of one field appear the later one wins, as it does in Go.  Unknown keys are ignored.
* **``null``** sets a pointer, slice, map or ``interface{}`` field to nil (``None`` here) and
  leaves any other field as it was.  An absent field keeps its zero value: ``None`` for pointers,
  slices, maps and IPs, ``False``/``0``/``""`` otherwise.  A struct field seen twice is merged.
* **Text types** (``net.IP``, ``types.IPNet``) parse their string: an empty string leaves a
  ``net.IP`` unset, exactly as Go's ``net.IP.UnmarshalText`` does, while an empty (or ``null``)
  CIDR is an error (``invalid CIDR address: ``) as in libcni's ``types.IPNet``.
* **A value of the wrong JSON type** fails with Go's text (the first one in document order, unless
  a later value aborts decoding: a text that does not parse, as with Go's ``saveError``), ``json: cannot unmarshal <kind> into Go
  struct field <Struct>.<path> of type <type>``, where ``<Struct>`` is the innermost struct type and
  ``<path>`` the json names from the top; callers prefix their own context (``failed to load
  netconf: ``) through the ``prefix`` argument.  Fractions and out-of-range numbers for integer
  fields fail as ``cannot unmarshal number <n>``.

The module is on every plugin's exec path: it imports nothing beyond ``errors``, and the Go IP
parser (:mod:`cnichain.common.goip`, with ``ipaddress``) only when an address is actually decoded.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

from .errors import CniError


class DecodeError(CniError):
    """A Go decoding failure (code 999, the reference reports a plain error)."""

    def __init__(self, msg: str, type_error: Optional[tuple[str, str]] = None) -> None:
        super().__init__(999, msg)
        # (value text, Go type) of an UnmarshalTypeError, which an enclosing decoder relabels
        # with its own field (see :class:`Custom`); None for other errors.
        self.type_error = type_error


def fold(key: str) -> str:
    """Go's case folding for field names (``casefold`` also maps the Kelvin sign and long s as Go does)."""
    return key.casefold()


def kind(value: Any) -> str:
    """The JSON kind Go names in its type errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _number_text(value: Any) -> str:
    """A number as Go quotes it in ``cannot unmarshal number X`` (Go quotes the literal; Python's
    parser keeps only the value, so ``1e3`` reads back as ``1000.0``)."""
    return repr(value) if isinstance(value, float) else str(value)


class _Ctx:
    """Where the decoder is: the innermost struct's Go type name and the json path from the top,
    plus the type error saved so far in this ``json.Unmarshal`` call (shared by all its contexts)."""

    __slots__ = ("struct", "path", "prefix", "saved")

    def __init__(self, struct: str, path: str, prefix: str, saved: Optional[list] = None) -> None:
        self.struct = struct
        self.path = path
        self.prefix = prefix
        self.saved: list[DecodeError] = [] if saved is None else saved

    def at(self, name: str) -> "_Ctx":
        return _Ctx(self.struct, f"{self.path}.{name}" if self.path else name, self.prefix, self.saved)

    def inside(self, struct: str) -> "_Ctx":
        return _Ctx(struct, self.path, self.prefix, self.saved)

    def save(self, err: DecodeError) -> None:
        """Go's ``saveError``: keep the first type error and go on decoding."""
        if not self.saved:
            self.saved.append(err)

    def finish(self) -> None:
        """The end of one ``json.Unmarshal``: the first saved type error, if any, is its result."""
        if self.saved:
            raise self.saved[0]

    def type_error(self, value_text: str, go_type: str) -> DecodeError:
        if self.path:
            where = f"Go struct field {self.struct}.{self.path}"
        else:
            where = "Go value"
        return DecodeError(
            f"{self.prefix}json: cannot unmarshal {value_text} into {where} of type {go_type}",
            (value_text, go_type),
        )

    def text_error(self, message: str) -> DecodeError:
        return DecodeError(f"{self.prefix}{message}")


class GoType:
    """One Go type: how a JSON value decodes into it, and its zero value."""

    __slots__ = ("go_name",)
    nilable = False  # pointers, slices, maps, interface{}: JSON null resets them to nil
    text = False  # an encoding.TextUnmarshaler: Go names a pointer to it, not the type, in type errors
    zero: Any = None

    def __init__(self, go_name: str) -> None:
        self.go_name = go_name

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        raise NotImplementedError

    def mismatch(self, value: Any, ctx: _Ctx) -> DecodeError:
        return ctx.type_error(kind(value), self.go_name)

    def skip(self, value: Any, ctx: _Ctx, current: Any, value_text: str = "") -> Any:
        """A value of the wrong JSON kind: Go saves the type error, leaves the target as it was
        (a fresh slice element stays zero) and decodes on; an error that aborts decoding later (a
        text that does not parse) is reported instead of it."""
        ctx.save(ctx.type_error(value_text or kind(value), self.go_name))
        return _zero(self) if current is None else current

    def null(self, ctx: _Ctx, current: Any) -> Any:
        """What JSON ``null`` does to a value of this type: nil for pointers, slices, maps and
        interfaces, nothing otherwise."""
        return None if self.nilable else current


class _Bool(GoType):
    __slots__ = ()
    zero = False

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, bool):
            return self.skip(value, ctx, current)
        return value


class _Int(GoType):
    """A Go integer type: a JSON number without a fraction, within the type's range."""

    __slots__ = ("low", "high")
    zero = 0

    def __init__(self, go_name: str, low: int, high: int) -> None:
        super().__init__(go_name)
        self.low = low
        self.high = high

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.skip(value, ctx, current)
        if isinstance(value, float) or not self.low <= value <= self.high:
            return self.skip(value, ctx, current, f"number {_number_text(value)}")
        return value


class _Float(GoType):
    __slots__ = ()
    zero = 0.0

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.skip(value, ctx, current)
        return float(value)


class _Str(GoType):
    __slots__ = ()
    zero = ""

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            return self.skip(value, ctx, current)
        return value


class _Any(GoType):
    """``interface{}`` (or ``json.RawMessage``): any JSON value, kept as decoded."""

    __slots__ = ()
    nilable = True

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        return value


class _IP(GoType):
    """``net.IP``: a string; empty means unset (nil), anything else must parse."""

    __slots__ = ()
    nilable = True
    text = True

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            return self.skip(value, ctx, current)
        if value == "":
            return None
        return parse_ip(value, ctx)


class _CIDR(GoType):
    """libcni's ``types.IPNet``: a CIDR string keeping the host bits (``10.1.0.5/16``).

    Decodes to an ``ipaddress`` interface object; absent is None.  The type has its own
    ``UnmarshalJSON``, which decodes the raw value into a Go ``string`` and parses that, so:
    an empty string *and* ``null`` fail as ``invalid CIDR address: `` (Go hands ``null`` to a
    non-pointer's UnmarshalJSON), and a wrong JSON type names ``string`` as the Go type (the
    inner decode's error, which the outer decoder labels with the field it was filling).
    """

    __slots__ = ()

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            raise ctx.type_error(kind(value), "string")
        return parse_cidr(value, ctx)

    def null(self, ctx: _Ctx, current: Any) -> Any:
        return parse_cidr("", ctx)


class Ptr(GoType):
    """``*T``: absent or null is None; otherwise T."""

    __slots__ = ("elem",)
    nilable = True

    def __init__(self, elem: GoType) -> None:
        super().__init__("*" + elem.go_name)
        self.elem = elem

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if self.elem.text and not isinstance(value, str):
            return self.skip(value, ctx, current)  # Go names the field's own type here: *net.IP
        return self.elem.decode(value, ctx, current)


class Custom(GoType):
    """A type with its own ``UnmarshalJSON`` that decodes into an inner struct (libcni's
    ``types.Route`` into ``types.route``): the inner decode's type errors keep their value and Go
    type but are relabelled with the field the outer decoder was filling when it called
    ``UnmarshalJSON``, which is what Go's ``addErrorContext`` does to an error returned from it
    (``Go struct field IPAMConfig.ipam.routes of type int`` for a string ``mtu``)."""

    __slots__ = ("inner",)

    def __init__(self, inner: GoType, go_name: str = "") -> None:
        super().__init__(go_name or inner.go_name)
        self.inner = inner

    def zero_value(self) -> Any:
        return _zero(self.inner)

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        inner = _Ctx("", "", ctx.prefix)  # UnmarshalJSON runs a json.Unmarshal of its own
        try:
            out = self.inner.decode(value, inner, current)
            inner.finish()
            return out
        except DecodeError as exc:
            # Whatever it returns aborts the outer decode (it is not a saved type error there).
            if exc.type_error is None or not ctx.path:
                raise
            raise ctx.type_error(*exc.type_error) from None

    def null(self, ctx: _Ctx, current: Any) -> Any:
        # UnmarshalJSON("null") decodes nothing into a fresh inner value: the zero value.
        return _zero(self.inner)


class List(GoType):
    """``[]T``: a JSON array (null is nil); elements that are null get T's zero value."""

    __slots__ = ("elem",)
    nilable = True

    def __init__(self, elem: GoType, go_name: str = "") -> None:
        super().__init__(go_name or "[]" + elem.go_name)
        self.elem = elem

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, list):
            return self.skip(value, ctx, current)
        return [_element(self.elem, item, ctx) for item in value]


class Map(GoType):
    """``map[string]T``: a JSON object merged into the current map; null values are T's zero."""

    __slots__ = ("elem",)
    nilable = True

    def __init__(self, elem: GoType) -> None:
        super().__init__("map[string]" + elem.go_name)
        self.elem = elem

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, dict):
            return self.skip(value, ctx, current)
        out = dict(current) if isinstance(current, dict) else {}
        for key, item in value.items():
            out[key] = _element(self.elem, item, ctx)
        return out


class Field:
    """One struct field: its json name, its Go type, and the reference's Go field name
    (``hostIP`` -> ``HostIP``, ``snat`` -> ``SNAT``, ``isGateway`` -> ``IsGW``; default: the json
    name with a capital first letter).
    """

    __slots__ = ("name", "type", "go_field")

    def __init__(self, name: str, type: GoType, go_field: str = "") -> None:
        self.name = name
        self.type = type
        self.go_field = go_field or name[:1].upper() + name[1:]

    @property
    def go_key(self) -> str:
        """The key as a Go program marshalling a struct without json tags writes it (containerd's
        go-cni does): the Go field name when it is the json name in another case (``SNAT``),
        else the json name capitalised (``IsGateway``: a field named ``IsGW`` would not match)."""
        if fold(self.go_field) == fold(self.name):
            return self.go_field
        return self.name[:1].upper() + self.name[1:]


class Struct(GoType):
    """A Go struct: decodes a JSON object into a dict holding every declared field.

    ``fields`` may be :class:`Field` objects or ``(json name, type)`` pairs.  An anonymous struct
    (``RuntimeConfig struct {...}``) has the empty name, which Go's errors show as ``.field``; its
    ``go_name`` may spell out the literal type (``struct { Mac string "json:\\"mac\\"" }``), which is
    what Go prints as the type when the struct itself receives a value of the wrong kind.
    """

    __slots__ = ("fields", "_by_name", "_by_fold")

    def __init__(self, go_name: str, fields: list[Any]) -> None:
        super().__init__(go_name or "struct")
        self.fields: tuple[Field, ...] = tuple(f if isinstance(f, Field) else Field(*f) for f in fields)
        self._by_name = {f.name: f for f in self.fields}
        self._by_fold: dict[str, Field] = {}
        for f in self.fields:
            self._by_fold.setdefault(fold(f.name), f)

    @property
    def short_name(self) -> str:
        """``main.PortMapConf`` -> ``PortMapConf``: Go names the struct without its package in errors."""
        return "" if self.go_name.startswith("struct") else self.go_name.rsplit(".", 1)[-1]

    def zero_value(self) -> dict:
        return {f.name: _zero(f.type) for f in self.fields}

    def field(self, key: str) -> Optional[Field]:
        """The field a JSON key fills: exact json name first, then case-insensitively."""
        found = self._by_name.get(key)
        return found if found is not None else self._by_fold.get(fold(key))

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, dict):
            return self.skip(value, ctx, current)
        out = dict(current) if isinstance(current, dict) else self.zero_value()
        inner = ctx.inside(self.short_name)
        for key, item in value.items():
            f = self.field(key) if isinstance(key, str) else None
            if f is None:
                continue
            if item is None:
                out[f.name] = f.type.null(inner.at(f.name), out[f.name])
                continue
            out[f.name] = f.type.decode(item, inner.at(f.name), out[f.name])
        return out


def _zero(t: GoType) -> Any:
    """A fresh zero value (a nested struct's zero is a dict of its own zero fields)."""
    return t.zero_value() if isinstance(t, (Struct, Custom)) else t.zero


def _element(elem: GoType, item: Any, ctx: _Ctx) -> Any:
    return elem.null(ctx, _zero(elem)) if item is None else elem.decode(item, ctx)


# The Go types the plugins use.
BOOL = _Bool("bool")
INT = _Int("int", -(2**63), 2**63 - 1)
UINT = _Int("uint", 0, 2**64 - 1)
UINT64 = _Int("uint64", 0, 2**64 - 1)
UINT32 = _Int("uint32", 0, 2**32 - 1)
UINT16 = _Int("uint16", 0, 2**16 - 1)
FLOAT64 = _Float("float64")
STRING = _Str("string")
ANY = _Any("interface {}")
IP = _IP("net.IP")
CIDR = _CIDR("types.IPNet")


def decode(value: Any, schema: Struct, prefix: str = "") -> dict:
    """Decode ``value`` into ``schema``; a :class:`DecodeError` carries Go's message after ``prefix``."""
    ctx = _Ctx(schema.short_name, "", prefix)
    if value is None:
        return schema.zero_value()
    out = schema.decode(value, ctx)
    ctx.finish()
    return out


def decode_into(current: dict, value: Any, schema: Struct, prefix: str = "") -> dict:
    """Decode a second object over an already decoded struct (``args.cni`` over the plugin's own
    keys): fields absent there keep their value, as when Go unmarshals into a filled struct."""
    if value is None:
        return current
    ctx = _Ctx(schema.short_name, "", prefix)
    out = schema.decode(value, ctx, current)
    ctx.finish()
    return out


def parse_ip(text: str, ctx: Optional[_Ctx] = None) -> Any:
    """``net.IP``'s text: :func:`cnichain.common.goip.parse_ip`, failing with Go's error text."""
    from .goip import parse_ip as go_parse_ip

    addr = go_parse_ip(text)
    if addr is None:
        msg = f"invalid IP address: {text}"
        raise ctx.text_error(msg) if ctx is not None else DecodeError(msg)
    return addr


def parse_cidr(text: str, ctx: Optional[_Ctx] = None) -> Any:
    """``types.IPNet``'s text: :func:`cnichain.common.goip.parse_cidr` (``10.1.0.5/16`` ->
    ``IPv4Interface('10.1.0.5/16')``), failing with Go's error text."""
    from .goip import parse_cidr as go_parse_cidr

    iface = go_parse_cidr(text)
    if iface is None:
        msg = f"invalid CIDR address: {text}"
        raise ctx.text_error(msg) if ctx is not None else DecodeError(msg)
    return iface


def overlay(current: Any, value: Any) -> Any:
    """A second object decoded over an already filled struct: absent or ``null`` keeps ``current``."""
    return current if value is None else value
