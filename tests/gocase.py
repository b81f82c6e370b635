"""Helpers for the Go-decoding table tests: walk a config alongside its gojson schema.

Go matches JSON keys to struct fields case-insensitively, so a runtime that marshals the
reference's structs without json tags (containerd's go-cni: ``{"Subnet": ..., "RangeStart": ""}``)
and one that uses the camelCase tags (CRI-O's ocicni, podman) must be read alike.  These helpers
find every declared key of a config and rewrite its spelling, so a table test can cover each key
of a plugin without listing the casings by hand.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterator

from cnichain.common import gojson

Path = tuple[Any, ...]


def go_casing(field: gojson.Field) -> str:
    """The key as a Go marshaller without json tags would write it (see ``Field.go_key``)."""
    return field.go_key


def upper_casing(field: gojson.Field) -> str:
    return field.name.upper()


def _inner(t: gojson.GoType) -> gojson.GoType:
    while isinstance(t, (gojson.Ptr, gojson.Custom)):
        t = t.elem if isinstance(t, gojson.Ptr) else t.inner
    return t


def keys(value: Any, t: gojson.GoType, path: Path = ()) -> Iterator[tuple[Path, gojson.Field]]:
    """Every (path to a key, the field it fills) in ``value``, depth first, in document order."""
    t = _inner(t)
    if isinstance(t, gojson.List) and isinstance(value, list):
        for i, item in enumerate(value):
            yield from keys(item, t.elem, path + (i,))
    elif isinstance(t, gojson.Struct) and isinstance(value, dict):
        for key, item in value.items():
            field = t.field(key)
            if field is not None:
                yield path + (key,), field
                yield from keys(item, field.type, path + (key,))


def path_id(path: Path) -> str:
    return ".".join(str(p) for p in path)


def _parent(conf: Any, path: Path) -> Any:
    for step in path[:-1]:
        conf = conf[step]
    return conf


def rename(conf: dict, path: Path, new_key: str) -> dict:
    """A copy of ``conf`` with the key at ``path`` spelled ``new_key`` (order kept)."""
    out = copy.deepcopy(conf)
    parent = _parent(out, path)
    items = list(parent.items())
    parent.clear()
    for key, value in items:
        parent[new_key if key == path[-1] else key] = value
    return out


def replace(conf: dict, path: Path, value: Any) -> dict:
    out = copy.deepcopy(conf)
    _parent(out, path)[path[-1]] = value
    return out


def remove(conf: dict, path: Path) -> dict:
    out = copy.deepcopy(conf)
    del _parent(out, path)[path[-1]]
    return out


def recase_all(conf: dict, schema: gojson.Struct, casing: Callable[[gojson.Field], str]) -> dict:
    """``conf`` with every declared key respelled by ``casing`` (deepest keys first)."""
    out = conf
    for path, field in sorted(keys(conf, schema), key=lambda pf: -len(pf[0])):
        out = rename(out, path, casing(field))
    return out


def outcome(fn: Callable[[], Any]) -> Any:
    """The value ``fn`` returns, or ("error", message) for a CniError: two configs that must be
    read alike must also fail alike."""
    from cnichain.common.errors import CniError

    try:
        return fn()
    except CniError as exc:
        return ("error", exc.code, exc.msg)
