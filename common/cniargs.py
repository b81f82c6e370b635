"""CNI_ARGS (``K1=V1;K2=V2``) parsing with libcni's rules.

Keys are matched case-sensitively against the names a plugin knows; unknown keys are an error
unless ``IgnoreUnknown`` is true, which is what Kubernetes runtimes always send.
"""

from __future__ import annotations

from .errors import plugin_error

_TRUE = {"1", "t", "true"}
_FALSE = {"0", "f", "false"}


def parse_bool(value: str, pair: str) -> bool:
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise plugin_error(
        f'ARGS: error parsing value of pair "{pair}": boolean unmarshal error: invalid input {value}'
    )


def parse_cni_args(raw: str, known: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """Return the known keys of CNI_ARGS; raise as libcni's LoadArgs does on malformed input."""
    if not raw:
        return {}
    pairs: list[tuple[str, str, str]] = []
    ignore_unknown = False
    for item in raw.split(";"):
        parts = item.split("=")
        if len(parts) != 2:
            raise plugin_error(f'ARGS: invalid pair "{item}"')
        key, value = parts
        if key == "IgnoreUnknown":
            ignore_unknown = parse_bool(value, item)
            continue
        pairs.append((key, value, item))
    out: dict[str, str] = {}
    unknown: list[str] = []
    for key, value, item in pairs:
        if key in known:
            out[key] = value
        else:
            unknown.append(item)
    if unknown and not ignore_unknown:
        quoted = " ".join(f'"{u}"' for u in unknown)
        raise plugin_error(f"ARGS: unknown args [{quoted}]")
    return out
