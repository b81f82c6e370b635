"""Reading a network config the way Go's ``encoding/json`` fills a typed struct.

The reference plugins decode their config into Go structs, so two of Go's decoding traits are part
of the observable contract: keys match struct fields case-insensitively (an exact match wins), and
a JSON ``null`` leaves the field at its zero value.  A value of the wrong JSON type fails with
``json: cannot unmarshal <kind> into Go struct field <Struct>.<path> of type <type>``, which
callers prefix with their own context (``failed to load netconf: ...``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

from .errors import CniError, plugin_error


def get(obj: Any, key: str) -> Any:
    """A struct field lookup: the exact key first, then the first case-insensitive match."""
    if not isinstance(obj, dict):
        return None
    if key in obj:
        return obj[key]
    low = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


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


def overlay(current: Any, value: Any) -> Any:
    """A second object decoded over an already filled struct (``args.cni`` over the plugin's own
    keys): a field that is absent or ``null`` there keeps the value it had."""
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
        raise plugin_error(f"{prefix}json: cannot unmarshal number {value!r} into Go struct field {where} of type int")
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
