"""The one path from a kernel refusal to a CNI error.

A kernel refusal is pyroute2's ``NetlinkError`` (an errno from a netlink request), an ``OSError``
from ``/proc/sys`` or a state file, or a failed libnftables transaction.  Plugin code catches
exactly these through :func:`failures` and re-raises them as :class:`KernelError`: a
:class:`~cnichain.common.errors.CniError` that also carries the errno, worded as the reference
plugins word it (``failed to create bridge "cni0": file exists``).

Anything else -- a ``TypeError`` after a pyroute2 API change, a bug -- is *not* caught here: it
reaches the skeleton, which reports it as an internal error (code 999, "unexpected error") rather
than disguising it as "failed to create bridge".

pyroute2 is never imported by this module: its ``NetlinkError`` is looked up in ``sys.modules``
when an exception is being matched.  If pyroute2 is not loaded, no netlink call has been made, so
no ``NetlinkError`` can be in flight; the cold exec path stays free of the ~90 ms import.
"""

from __future__ import annotations

import os
import sys

from .errors import CniError, Code

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Optional

_PYROUTE2_EXCEPTIONS = "pyroute2.netlink.exceptions"


def failures() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the kernel said no", for an ``except`` clause.

    Python evaluates an ``except`` expression only while matching a raised exception, so
    ``except failures() as exc:`` costs nothing on the success path.
    """
    mod = sys.modules.get(_PYROUTE2_EXCEPTIONS)
    netlink_error = getattr(mod, "NetlinkError", None) if mod is not None else None
    return (netlink_error, OSError) if netlink_error is not None else (OSError,)


def errno_of(exc: BaseException) -> Optional[int]:
    """The errno a kernel failure carries (``NetlinkError.code`` or ``OSError.errno``), if any."""
    if isinstance(exc, KernelError):
        return exc.errno
    if isinstance(exc, CniError):
        return None  # its ``code`` is a CNI code, not an errno
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    code = getattr(exc, "errno", None)
    return code if isinstance(code, int) else None


def kernel_text(exc: BaseException) -> str:
    """The kernel's reason as the C library words it (``File exists``), as Python reports it."""
    if isinstance(exc, KernelError):
        return exc.reason
    code = errno_of(exc)
    args: tuple[object, ...] = getattr(exc, "args", ())
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if len(args) > 1 and args[1]:
        return str(args[1])  # NetlinkError(code, msg): msg defaults to strerror(code)
    if isinstance(code, int) and code > 0:
        return os.strerror(code)
    return str(exc)


def go_text(exc: BaseException) -> str:
    """The reason as Go prints a ``syscall.Errno``: the C library's text in lower case."""
    code = errno_of(exc)
    if isinstance(code, int) and code > 0:
        return os.strerror(code).lower()
    text = kernel_text(exc)
    return text[:1].lower() + text[1:]


class KernelError(CniError):
    """A kernel refusal, with its errno, reported as ``<context>: <reason>`` (code 999 by default).

    ``reason`` is kept apart so a caller can re-wrap the error under another context without
    parsing the message.
    """

    def __init__(self, context: str, errno: Optional[int], reason: str, code: int = Code.INTERNAL) -> None:
        super().__init__(code, f"{context}: {reason}" if context else reason)
        self.context = context
        self.errno = errno
        self.reason = reason

    @classmethod
    def of(cls, exc: BaseException, context: str, *, go: bool = True) -> KernelError:
        """Wrap a caught kernel failure; ``go=False`` keeps the C library's capitalised text."""
        return cls(context, errno_of(exc), go_text(exc) if go else kernel_text(exc))

    def rewrap(self, context: str) -> KernelError:
        """The same refusal under another context (``create ifb qdisc`` instead of ``create qdisc``)."""
        return KernelError(context, self.errno, self.reason, self.code)


class reported_as:
    """``with reported_as("failed to set \\"eth0\\" up"):`` -- kernel failures inside become
    :class:`KernelError` under that context; everything else passes through untouched.

    A small class rather than a ``contextlib`` generator: ``contextlib`` is kept off the cold path.
    """

    __slots__ = ("context", "go")

    def __init__(self, context: str, *, go: bool = True) -> None:
        self.context = context
        self.go = go

    def __enter__(self) -> reported_as:
        return self

    def __exit__(self, exc_type: object, exc: Optional[BaseException], tb: object) -> None:
        if exc is None or isinstance(exc, CniError) or not isinstance(exc, failures()):
            return  # nothing to translate: the exception (if any) propagates as it is
        raise KernelError.of(exc, self.context, go=self.go) from None


class NftError(KernelError):
    """A libnftables transaction or listing that failed; ``text`` is libnftables' own report.

    libnftables reports errors as text, not errno; the errno is recovered from the C library
    wording it embeds (``Could not process rule: No such file or directory``) when it is there.
    """

    def __init__(self, context: str, text: str) -> None:
        super().__init__(context, _errno_in(text), text)
        self.text = text


_ERRNO_NAMES = ("EEXIST", "ENOENT", "EBUSY", "EPERM", "EINVAL", "ENOSPC", "EOPNOTSUPP")


def _errno_in(text: str) -> Optional[int]:
    import errno

    for name in _ERRNO_NAMES:
        code = getattr(errno, name)
        if os.strerror(code) in text:
            return code
    return None
