"""CNI spec versions: the supported list, parsing and ordering."""

from __future__ import annotations

from .errors import CniError, Code

ALL: tuple[str, ...] = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CURRENT = "1.1.0"
# A config without cniVersion is read as 0.1.0, as libcni does.
DEFAULT = "0.1.0"


def parse(version: str) -> tuple[int, int, int]:
    """'1.0' -> (1, 0, 0).  More than three parts or non-numbers are an error, as in libcni."""
    parts = version.split(".")
    if not 1 <= len(parts) <= 3:
        raise CniError(Code.INCOMPATIBLE_VERSION, f"invalid version {version!r}: too many parts")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise CniError(Code.INCOMPATIBLE_VERSION, f"invalid version {version!r}") from None
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


def at_least(version: str, minimum: str) -> bool:
    return parse(version) >= parse(minimum)


def starting_from(minimum: str) -> tuple[str, ...]:
    return tuple(v for v in ALL if at_least(v, minimum))
