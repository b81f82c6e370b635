"""JSON in and out for the cold exec path, without importing the ``json`` package.

``import json`` costs a cold plugin exec ~3-4 ms on a 2-core node (a third of the interpreter's
own start-up): its decoder and encoder import ``re``, which imports ``enum``, ``functools``,
``collections`` and ``copyreg``, for a few regular expressions a plugin never needs.  The work
itself is done by the C accelerator ``_json`` that ``json`` uses anyway, so this module drives it
directly:

* :func:`loads` scans with ``_json.make_scanner``, the scanner ``json.loads`` runs.  Anything it
  does not take on the fast path -- input that is not plain UTF-8 (a BOM, UTF-16/32), or any
  input the scanner refuses -- goes to ``json.loads`` itself, so every error (its type and its
  text, which the skeleton reports) and every edge case is exactly ``json``'s.
* :func:`dumps` writes what ``json.dumps`` writes (same separators, indentation, key order, ASCII
  escapes through ``_json``'s own ``encode_basestring_ascii``, ``NaN``/``Infinity``) for the
  values plugins emit -- dicts with string keys, lists, tuples, strings, ints, floats, booleans
  and None -- and hands anything else to ``json.dumps``.

tests/unit/test_leanjson.py compares both with ``json`` on the same inputs.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable, Optional

_quote = _json.encode_basestring_ascii
_make_scanner: Any = _json.make_scanner  # its stub wants a JSONDecoder; it reads only the attributes below

_WHITESPACE = " \t\n\r"  # json's WHITESPACE: what may surround the document
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``, with its defaults."""

    __slots__ = ("object_hook", "object_pairs_hook")
    strict = True
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__

    def __init__(self, object_pairs_hook: Optional[Callable[[list], Any]]) -> None:
        self.object_hook = None
        self.object_pairs_hook = object_pairs_hook


_SCANNER = _make_scanner(_Context(None))


def _skip(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WHITESPACE:
        i += 1
    return i


def _text(data: bytes | bytearray | str) -> Optional[str]:
    """``data`` as the text ``json.loads`` would scan, when it is plain UTF-8 (None otherwise)."""
    if isinstance(data, str):
        return None if data.startswith("\ufeff") else data
    # json.detect_encoding: a UTF-8 BOM, or a NUL among the first bytes, means another decoding
    # (UTF-16/32 BOMs are not valid UTF-8 and fail the decode below)
    if data.startswith(b"\xef\xbb\xbf") or b"\x00" in data[:4]:
        return None
    try:
        return bytes(data).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def loads(data: bytes | bytearray | str, object_pairs_hook: Optional[Callable[[list], Any]] = None) -> Any:
    """``json.loads(data, object_pairs_hook=...)``: the same value, or the same exception."""
    s = _text(data)
    if s is not None:
        scan = _SCANNER if object_pairs_hook is None else _make_scanner(_Context(object_pairs_hook))
        try:
            value, end = scan(s, _skip(s, 0))
        except (StopIteration, ValueError, RecursionError, SystemError):
            # json.loads raises its own error for it, below.  (SystemError: on a syntax error the
            # scanner looks its exception type up in json.decoder, and finds nothing while
            # json is not imported yet.)
            pass
        else:
            if _skip(s, end) == len(s):
                return value
    import json

    return json.loads(data, object_pairs_hook=object_pairs_hook)


class _Unsupported(Exception):
    """A value :func:`dumps` leaves to ``json.dumps`` (non-string keys, other types, cycles)."""


def _float(f: float) -> str:
    if f != f:
        return "NaN"
    if f == float("inf"):
        return "Infinity"
    if f == float("-inf"):
        return "-Infinity"
    return float.__repr__(f)


def _scalar(o: Any) -> Optional[str]:
    if isinstance(o, str):
        return _quote(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    return None


def _encode(o: Any, out: list[str], indent: Optional[str], item_sep: str, key_sep: str, sort_keys: bool,
            level: int) -> None:
    text = _scalar(o)
    if text is not None:
        out.append(text)
        return
    if level > 200:  # json's own recursion would be the one to report it
        raise _Unsupported
    if isinstance(o, (list, tuple)):
        items: Any = o
        opening, closing = "[", "]"
    elif isinstance(o, dict):
        items = sorted(o.items()) if sort_keys else o.items()
        opening, closing = "{", "}"
    else:
        raise _Unsupported
    if not o:
        out.append(opening + closing)
        return
    out.append(opening)
    if indent is not None:
        level += 1
        newline = "\n" + indent * level
        sep = item_sep + newline
        out.append(newline)
    else:
        sep = item_sep
    first = True
    for item in items:
        if not first:
            out.append(sep)
        first = False
        if opening == "{":
            key, item = item
            if not isinstance(key, str):
                raise _Unsupported
            out.append(_quote(key))
            out.append(key_sep)
        _encode(item, out, indent, item_sep, key_sep, sort_keys, level)
    if indent is not None:
        out.append("\n" + indent * (level - 1))
    out.append(closing)


def dumps(obj: Any, *, indent: Optional[int] = None, separators: Optional[tuple[str, str]] = None,
          sort_keys: bool = False) -> str:
    """``json.dumps(obj, indent=..., separators=..., sort_keys=...)``, byte for byte."""
    item_sep, key_sep = separators if separators is not None else ((",", ": ") if indent is not None else (", ", ": "))
    out: list[str] = []
    try:
        _encode(obj, out, None if indent is None else " " * indent, item_sep, key_sep, sort_keys, 0)
    except (_Unsupported, TypeError):
        import json

        return json.dumps(obj, indent=indent, separators=separators, sort_keys=sort_keys)
    return "".join(out)
