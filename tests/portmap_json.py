"""Reading portmap's libnftables JSON command lists in tests: one short tuple per command.

``("create", "element", "dnat_any", "any/4/tcp/8080", "c-<owner>")`` says more in an assertion than
the nested dicts, and maps element keys back to portmap's own key tokens through the same
:func:`names.key_from_element` that reads kernel listings, so a wrong JSON key shows up as ``None``.
"""

from __future__ import annotations

from typing import Optional

from cnichain.plugins.portmap import names


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
        key, target = (item, None) if verb == "delete" else (item[0], item[1]["jump"]["target"])
        return (verb, kind, body["name"], names.key_from_element(body["name"], key), target)
    return (verb, kind, body["name"])


def briefs(commands: list[dict]) -> list[tuple]:
    return [brief(c) for c in commands]


def rules(commands: list[dict], chain: str) -> list[dict]:
    """The ``rule`` bodies added to ``chain``, in order."""
    return [c["add"]["rule"] for c in commands if "rule" in c.get("add", {}) and c["add"]["rule"]["chain"] == chain]


def jump_targets(rule: dict) -> list[str]:
    return [e["jump"]["target"] for e in rule["expr"] if "jump" in e]


def comment_of(rule: dict) -> Optional[str]:
    return rule.get("comment")
