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
  ``net.IP`` unset, exactly as Go's ``net.IP.UnmarshalText`` does, while an empty CIDR is an error
  (``invalid CIDR address: ``) as in libcni's ``types.IPNet``.
* **A value of the wrong JSON type** fails with Go's text, ``json: cannot unmarshal <kind> into Go
  struct field <Struct>.<path> of type <type>``, where ``<Struct>`` is the innermost struct type and
  ``<path>`` the json names from the top; callers prefix their own context (``failed to load
  netconf: ``) through the ``prefix`` argument.  Fractions and out-of-range numbers for integer
  fields fail as ``cannot unmarshal number <n>``.

The module is on every plugin's exec path: it imports nothing beyond ``errors``, and the
``ipaddress`` module only when an address is actually decoded.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

from .errors import CniError, plugin_error


class DecodeError(CniError):
    """A Go decoding failure (code 999, the reference reports a plain error)."""

    def __init__(self, msg: str) -> None:
        super().__init__(999, msg)


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
    """A number as Go quotes it in ``cannot unmarshal number X``."""
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") and "e" not in text else text
    return str(value)


class _Ctx:
    """Where the decoder is: the innermost struct's Go type name and the json path from the top."""

    __slots__ = ("struct", "path", "prefix")

    def __init__(self, struct: str, path: str, prefix: str) -> None:
        self.struct = struct
        self.path = path
        self.prefix = prefix

    def at(self, name: str) -> "_Ctx":
        return _Ctx(self.struct, f"{self.path}.{name}" if self.path else name, self.prefix)

    def inside(self, struct: str) -> "_Ctx":
        return _Ctx(struct, self.path, self.prefix)

    def type_error(self, value_text: str, go_type: str) -> DecodeError:
        if self.path:
            where = f"Go struct field {self.struct}.{self.path}"
        else:
            where = "Go value"
        return DecodeError(f"{self.prefix}json: cannot unmarshal {value_text} into {where} of type {go_type}")

    def text_error(self, message: str) -> DecodeError:
        return DecodeError(f"{self.prefix}{message}")


class GoType:
    """One Go type: how a JSON value decodes into it, and its zero value."""

    __slots__ = ("go_name",)
    nilable = False  # pointers, slices, maps, interface{}: JSON null resets them to nil
    zero: Any = None

    def __init__(self, go_name: str) -> None:
        self.go_name = go_name

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        raise NotImplementedError

    def mismatch(self, value: Any, ctx: _Ctx) -> DecodeError:
        return ctx.type_error(kind(value), self.go_name)


class _Bool(GoType):
    __slots__ = ()
    zero = False

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, bool):
            raise self.mismatch(value, ctx)
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
            raise self.mismatch(value, ctx)
        if isinstance(value, float) or not self.low <= value <= self.high:
            raise ctx.type_error(f"number {_number_text(value)}", self.go_name)
        return value


class _Float(GoType):
    __slots__ = ()
    zero = 0.0

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.mismatch(value, ctx)
        return float(value)


class _Str(GoType):
    __slots__ = ()
    zero = ""

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            raise self.mismatch(value, ctx)
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

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            raise self.mismatch(value, ctx)
        if value == "":
            return None
        return parse_ip(value, ctx)


class _CIDR(GoType):
    """libcni's ``types.IPNet``: a CIDR string keeping the host bits (``10.1.0.5/16``).

    Decodes to an ``ipaddress`` interface object.  An empty string is an error, as in libcni.
    """

    __slots__ = ()
    nilable = True

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, str):
            raise self.mismatch(value, ctx)
        return parse_cidr(value, ctx)


class Ptr(GoType):
    """``*T``: absent or null is None; otherwise T."""

    __slots__ = ("elem",)
    nilable = True

    def __init__(self, elem: GoType) -> None:
        super().__init__("*" + elem.go_name)
        self.elem = elem

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        return self.elem.decode(value, ctx, current)


class List(GoType):
    """``[]T``: a JSON array (null is nil); elements that are null get T's zero value."""

    __slots__ = ("elem",)
    nilable = True

    def __init__(self, elem: GoType, go_name: str = "") -> None:
        super().__init__(go_name or "[]" + elem.go_name)
        self.elem = elem

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, list):
            raise self.mismatch(value, ctx)
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
            raise self.mismatch(value, ctx)
        out = dict(current) if isinstance(current, dict) else {}
        for key, item in value.items():
            out[key] = _element(self.elem, item, ctx)
        return out


class Field:
    """One struct field: its json name, its Go type, and how a Go program without json tags spells
    it (``hostIP`` -> ``HostIP``, ``snat`` -> ``SNAT``; default: the name with a capital first letter).

    The Go spelling matters because containerd's go-cni marshals its structs without tags; tests use
    it to send every key the way such a runtime would.  It must be a case variant of the json name,
    since that is all Go's decoder matches.
    """

    __slots__ = ("name", "type", "go_field")

    def __init__(self, name: str, type: GoType, go_field: str = "") -> None:
        go_field = go_field or name[:1].upper() + name[1:]
        if fold(go_field) != fold(name):
            raise ValueError(f"Go spelling {go_field!r} does not match json name {name!r}")
        self.name = name
        self.type = type
        self.go_field = go_field


class Struct(GoType):
    """A Go struct: decodes a JSON object into a dict holding every declared field.

    ``fields`` may be :class:`Field` objects or ``(json name, type)`` pairs.  An anonymous struct
    (``RuntimeConfig struct {...}``) has the empty name, which Go's errors show as ``.field``.
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
        return "" if self.go_name == "struct" else self.go_name.rsplit(".", 1)[-1]

    def zero_value(self) -> dict:
        return {f.name: _zero(f.type) for f in self.fields}

    def field(self, key: str) -> Optional[Field]:
        """The field a JSON key fills: exact json name first, then case-insensitively."""
        found = self._by_name.get(key)
        return found if found is not None else self._by_fold.get(fold(key))

    def decode(self, value: Any, ctx: _Ctx, current: Any = None) -> Any:
        if not isinstance(value, dict):
            raise self.mismatch(value, ctx)
        out = dict(current) if isinstance(current, dict) else self.zero_value()
        inner = ctx.inside(self.short_name)
        for key, item in value.items():
            f = self.field(key) if isinstance(key, str) else None
            if f is None:
                continue
            if item is None:
                if f.type.nilable:
                    out[f.name] = None
                continue
            out[f.name] = f.type.decode(item, inner.at(f.name), out[f.name])
        return out


def _zero(t: GoType) -> Any:
    """A fresh zero value (a nested struct's zero is a dict of its own zero fields)."""
    return t.zero_value() if isinstance(t, Struct) else t.zero


def _element(elem: GoType, item: Any, ctx: _Ctx) -> Any:
    return _zero(elem) if item is None else elem.decode(item, ctx)


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
    return schema.decode(value, ctx)


def decode_into(current: dict, value: Any, schema: Struct, prefix: str = "") -> dict:
    """Decode a second object over an already decoded struct (``args.cni`` over the plugin's own
    keys): fields absent there keep their value, as when Go unmarshals into a filled struct."""
    if value is None:
        return current
    return schema.decode(value, _Ctx(schema.short_name, "", prefix), current)


def parse_ip(text: str, ctx: Optional[_Ctx] = None) -> Any:
    """Go's ``net.ParseIP``: dotted IPv4 or IPv6 text, no zone; an IPv4-mapped IPv6 address is IPv4."""
    import ipaddress

    addr = None
    if "%" not in text:
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            addr = None
    if addr is None:
        msg = f"invalid IP address: {text}"
        raise ctx.text_error(msg) if ctx is not None else DecodeError(msg)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def parse_cidr(text: str, ctx: Optional[_Ctx] = None) -> Any:
    """Go's ``net.ParseCIDR`` keeping the address: ``10.1.0.5/16`` -> IPv4Interface('10.1.0.5/16')."""
    import ipaddress

    iface = None
    addr, sep, prefix = text.partition("/")
    if sep and prefix.isascii() and prefix.isdigit() and len(prefix) <= 3 and "%" not in addr:
        try:
            iface = ipaddress.ip_interface(f"{addr}/{int(prefix)}")
        except ValueError:
            iface = None
    if iface is None:
        msg = f"invalid CIDR address: {text}"
        raise ctx.text_error(msg) if ctx is not None else DecodeError(msg)
    return iface


# -- field-at-a-time helpers (kept for plugins not yet described by a schema) --------------------


def get(obj: Any, key: str) -> Any:
    """A struct field lookup: the exact key first, then the last case-insensitive match (Go applies
    keys in document order, so the later spelling wins)."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = fold(key)
    found = None
    for k, v in obj.items():
        if isinstance(k, str) and fold(k) == low:
            found = v
    return found


def overlay(current: Any, value: Any) -> Any:
    """A second object decoded over an already filled struct: absent or ``null`` keeps ``current``."""
    return current if value is None else value


def type_error(value: Any, where: str, go_type: str, prefix: str = "") -> CniError:
    return plugin_error(f"{prefix}json: cannot unmarshal {kind(value)} into Go struct field {where} of type {go_type}")


def want_bool(value: Any, where: str, prefix: str = "") -> Optional[bool]:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise type_error(value, where, "bool", prefix)
    return value


def want_int(value: Any, where: str, prefix: str = "") -> Optional[int]:
    """A Go ``int``: a JSON number without a fraction (``1.0`` is refused, as Go does)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise type_error(value, where, "int", prefix)
    if isinstance(value, float):
        raise plugin_error(f"{prefix}json: cannot unmarshal number {_number_text(value)} into Go struct field {where} of type int")
    return value


def want_str(value: Any, where: str, go_type: str = "string", prefix: str = "") -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise type_error(value, where, go_type, prefix)
    return value


def want_object(value: Any, where: str, go_type: str, prefix: str = "") -> Optional[dict]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise type_error(value, where, go_type, prefix)
    return value


def want_list(value: Any, where: str, go_type: str, prefix: str = "") -> Optional[list]:
    if value is None:
        return None
    if not isinstance(value, list):
        raise type_error(value, where, go_type, prefix)
    return value
