"""Reading portmap's libnftables JSON command lists in tests: one short tuple per command.

``("create", "element", "dnat_any", "any/4/tcp/8080", "c-<owner>")`` or ``("add", "element",
"own_any", "any/4/tcp/8080", "<owner>")`` says more in an assertion than the nested dicts, and maps
element keys back to portmap's own key tokens through the same functions that read kernel
listings, so a wrong JSON key shows up as ``None``.
"""

from __future__ import annotations

from typing import Optional

from cnichain.plugins.portmap import maps, names, rebuild as slow


def brief(command: dict) -> tuple:
    """``(verb, kind, name...)`` of one command; for elements the key token and jump target."""
    [(verb, obj)] = command.items()
    [(kind, body)] = obj.items()
    assert body["family"] == names.FAMILY and body.get("table", body.get("name")) == names.TABLE, body
    if kind == "table":
        return (verb, kind)
    if kind == "rule":
        return (verb, kind, body["chain"], body.get("comment"))
    if kind == "element":
        [item] = body["elem"]
        name = body["name"]
        key, value = (item, None) if verb == "delete" or name in names.SETS else (item[0], item[1])
        return (verb, kind, name, token(name, key), _value(value))
    return (verb, kind, body["name"])


def token(name: str, key: object) -> Optional[str]:
    """portmap's own name for an element key: a dispatch key token (verdict, ownership and target
    maps), an owner hash (OWNERS), a set element as :func:`rebuild.set_token` writes it."""
    if isinstance(key, dict) and isinstance(key.get("elem"), dict):
        key = key["elem"]["val"]  # a key with a comment
    if name == names.OWNERS:
        return maps.owner_of(key) or None
    if name in names.SETS:
        return slow.set_token(key)
    if name in names.OWN_MAPS.values():
        return names.key_from_own(name, key)
    if name in {n for n, _k, _v in names.TO_MAPS.values()}:
        return names.key_from_to(name, key)
    return names.key_from_element(name, key)


def _value(value: object) -> object:
    """A jump's target, a DNAT target as (address, port), "accept", an owner or digest hash."""
    if isinstance(value, dict):
        if "jump" in value:
            return value["jump"]["target"]
        if "concat" in value:
            return tuple(value["concat"])
        if "accept" in value:
            return "accept"
    if isinstance(value, str):
        return maps.owner_of(value) or value
    return value


def briefs(commands: list[dict]) -> list[tuple]:
    return [brief(c) for c in commands]


def rules(commands: list[dict], chain: str) -> list[dict]:
    """The ``rule`` bodies added to ``chain``, in order."""
    return [c["add"]["rule"] for c in commands if "rule" in c.get("add", {}) and c["add"]["rule"]["chain"] == chain]


def jump_targets(rule: dict) -> list[str]:
    return [e["jump"]["target"] for e in rule["expr"] if "jump" in e]


def comment_of(rule: dict) -> Optional[str]:
    return rule.get("comment")
