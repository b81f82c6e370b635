"""CNI error codes and the one exception type every plugin raises.

Only the skeleton turns a :class:`CniError` into the spec's error JSON and a non-zero exit; handlers
just raise.  Codes are the spec's well-known numbers plus libcni's 8 and 999.
"""

from __future__ import annotations


class Code:
    """The codes as plain ints: an ``IntEnum`` imports ``enum`` and with it ``functools`` and
    ``collections`` on every plugin exec, for names nothing prints."""

    UNKNOWN = 0
    INCOMPATIBLE_VERSION = 1
    UNSUPPORTED_FIELD = 2
    UNKNOWN_CONTAINER = 3
    INVALID_ENV = 4
    IO_FAILURE = 5
    DECODING_FAILURE = 6
    INVALID_NETWORK_CONFIG = 7
    INVALID_NETNS = 8
    TRY_AGAIN_LATER = 11
    NOT_AVAILABLE = 50
    LIMITED_CONNECTIVITY = 51
    INTERNAL = 999


class CniError(Exception):
    """An error with a spec code, a message and optional details, printed as CNI error JSON."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = int(code)
        self.msg = msg
        self.details = details

    def to_dict(self) -> dict:
        out: dict = {"code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.msg}; {self.details}" if self.details else self.msg


# host-local's refusal of a second address for the same attachment (the reference's words): owned
# here because bridge reads it -- an ADD that finds it was killed half way after its IPAM reserved.
DUPLICATE_ALLOCATION = "duplicate allocation is not allowed"


def plugin_error(msg: str, details: str = "") -> CniError:
    """A plain plugin failure: the reference plugins report these as code 999."""
    return CniError(Code.INTERNAL, msg, details)


def config_error(msg: str, details: str = "") -> CniError:
    """The network configuration is invalid (code 7)."""
    return CniError(Code.INVALID_NETWORK_CONFIG, msg, details)
