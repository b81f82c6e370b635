"""libnftables JSON command objects on portmap's one table, and the expressions its rules use.

Every portmap transaction is a list of these dicts, applied by :func:`cnichain.common.nft.apply`
as one atomic ``{"nftables": [...]}`` batch: nothing of the config is ever spliced into nft
*text*, so no quoting or parsing stands between a value and the kernel.  The forms are those
``nft -j list`` prints for what the previous text scripts installed (see ``man libnftables-json``),
so rules written by either version are the same objects in the kernel.

libnftables 1.0.x ignores a ``comment`` on tables and chains in JSON (only rule comments are
part of its schema); they are sent anyway for the versions that keep them.  Nothing reads them:
the identity of a container lives in the comment of its chain's first rule.  Pure: no kernel access.
"""

from __future__ import annotations

from .names import FAMILY, TABLE

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Optional


# -- objects -----------------------------------------------------------------------------------


def _obj(**fields: Any) -> dict:
    return {"family": FAMILY, "table": TABLE, **fields}


def _type(types: list[str]) -> Any:
    """A set's or map's key type as libnftables JSON writes it: a list when concatenated."""
    return types if len(types) > 1 else types[0]


def _key(exprs: list[dict]) -> dict:
    """A lookup key: one expression, or their concatenation."""
    return {"concat": exprs} if len(exprs) > 1 else exprs[0]


def table(comment: str) -> dict:
    return {"add": {"table": {"family": FAMILY, "name": TABLE, "comment": comment}}}


def verdict_map(name: str, key_types: list[str]) -> dict:
    """``add map``: a concatenation (several types) or a single type, mapping to verdicts."""
    return {"add": {"map": _obj(name=name, type=_type(key_types), map="verdict")}}


def data_map(name: str, key_types: list[str], value_type: str) -> dict:
    """``add map`` of a map whose values are data of one type (an owner, a digest)."""
    return {"add": {"map": _obj(name=name, type=_type(key_types), map=value_type)}}


def concat_map_text(name: str, key_types: list[str], value_types: list[str]) -> str:
    """``add map`` in nft's text syntax, for a map whose values are a concatenation (a DNAT
    target's address . port): libnftables 1.0.6 declares those only from text.  Only our own
    fixed names and types are spliced in, never anything a config or a request carries."""
    return (f"add map {FAMILY} {TABLE} {name} "
            f"{{ type {' . '.join(key_types)} : {' . '.join(value_types)} ; }}")


def table_text() -> str:
    return f"add table {FAMILY} {TABLE}"


def named_set(name: str, key_types: list[str]) -> dict:
    return {"add": {"set": _obj(name=name, type=_type(key_types))}}


def base_chain(name: str, hook: str, prio: int) -> dict:
    return {"add": {"chain": _obj(name=name, type="nat", hook=hook, prio=prio, policy="accept")}}


def chain(name: str, verb: str = "add", comment: Optional[str] = None) -> dict:
    """``add`` (no-op when present) or ``create`` (EEXIST when present) of a regular chain."""
    body = _obj(name=name)
    if comment is not None:
        body["comment"] = comment
    return {verb: {"chain": body}}


def flush_chain(name: str) -> dict:
    return {"flush": {"chain": _obj(name=name)}}


def delete_chain(name: str) -> dict:
    return {"delete": {"chain": _obj(name=name)}}


def rule(chain_name: str, expr: list[dict], comment: Optional[str] = None) -> dict:
    body = _obj(chain=chain_name, expr=expr)
    if comment is not None:
        body["comment"] = comment
    return {"add": {"rule": body}}


def element(map_name: str, key: Any, target: str = "", verb: str = "add") -> dict:
    """``add``/``create`` of a map element jumping to ``target``, or ``delete`` of it (no target)."""
    item: Any = key if verb == "delete" else [key, jump(target)]
    return {verb: {"element": _obj(name=map_name, elem=[item])}}


def items(name: str, elems: list[Any], verb: str = "add") -> dict:
    """``add``/``create``/``delete`` of elements of a set or map, as given: a set's keys, a map's
    ``[key, value]`` pairs (a delete takes keys only)."""
    return {verb: {"element": _obj(name=name, elem=elems)}}


def commented(key: Any, comment: str) -> dict:
    """An element key that carries a comment (the kernel keeps it; nothing compares it)."""
    return {"elem": {"val": key, "comment": comment}}


# -- expressions -------------------------------------------------------------------------------


def payload(protocol: str, field_: str) -> dict:
    return {"payload": {"protocol": protocol, "field": field_}}


def meta(key: str) -> dict:
    return {"meta": {"key": key}}


def match(left: dict, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def jump(target: str) -> dict:
    return {"jump": {"target": target}}


def vmap(key: list[dict], map_name: str) -> dict:
    return {"vmap": {"key": _key(key), "data": f"@{map_name}"}}


def dnat_map(family: int, key: list[dict], map_name: str) -> dict:
    """``dnat ip[6] to <key> map @<map>``: address and port from a map of ``addr . port`` values;
    a key the map lacks ends the rule without a verdict."""
    return {"dnat": {"family": "ip" if family == 4 else "ip6",
                     "addr": {"map": {"key": _key(key), "data": f"@{map_name}"}}}}


def in_set(key: list[dict], set_name: str) -> dict:
    """``<key> @<set>``: the key (a concatenation when several) is an element of the set."""
    return match(_key(key), f"@{set_name}")


def fib_daddr_local() -> dict:
    """``fib daddr type local``: only traffic to one of this node's own addresses."""
    return match({"fib": {"result": "type", "flags": ["daddr"]}}, "local")


def ct_status_dnat() -> dict:
    """``ct status dnat`` (a flag test, hence ``in``)."""
    return match({"ct": {"key": "status"}}, "dnat", "in")


def dnat(family: int, addr: str, port: int) -> dict:
    return {"dnat": {"family": "ip" if family == 4 else "ip6", "addr": addr, "port": port}}


CONTINUE: dict = {"continue": None}
ACCEPT: dict = {"accept": None}
MASQUERADE: dict = {"masquerade": None}
