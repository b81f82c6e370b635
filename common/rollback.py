"""One undo stack for every ADD that changes several things.

A handler registers an undo callable right after each step that changed something.  When a later
step fails, :meth:`Rollback.unwind` runs the undos newest first; an undo that itself fails is
logged and the unwinding goes on, so one stuck step never leaves the others behind.  The error
reported to the runtime stays the one that made ADD fail; the first undo failure is kept on
:attr:`Rollback.first_error` (and logged) for the caller and the log.

Every plugin uses it one way: as a context manager, with each undo's arguments bound when it is
pushed (never a lambda, which would read its variables at unwind time)::

    with Rollback() as undo:
        make_a(x); undo.push("remove a", remove_a, x)
        make_b(y); undo.push("remove b", remove_b, y)

Leaving the block by any exception -- a ``CniError``, a bug, ``SystemExit`` from a signal handler --
unwinds and re-raises it; leaving it normally keeps every change.  A process killed outright (SIGKILL)
unwinds nothing: what survives that is each plugin's DEL, which removes by name and tag.
"""

from __future__ import annotations

from .errors import CniError
from .kernel_errors import failures
from .log import log

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Callable, Optional


class Rollback:
    """Compensating actions, run in reverse order of registration."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[..., object], tuple[object, ...]]] = []
        self.first_error: Optional[BaseException] = None

    def push(self, what: str, undo: Callable[..., object], *args: object) -> None:
        """Register ``undo(*args)`` for a step that has just succeeded; ``what`` names it in the log.

        The arguments are bound now, so a loop can register one undo per item without the
        late-binding trap of a lambda over the loop variable.
        """
        self._steps.append((what, undo, args))

    def __enter__(self) -> Rollback:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: object, tb: object) -> None:
        """Unwind when the block raised; the exception goes on either way (nothing is swallowed)."""
        if exc_type is not None:
            self.unwind()

    def __len__(self) -> int:
        return len(self._steps)

    def unwind(self) -> Optional[BaseException]:
        """Run every undo newest first; return (and keep) the first undo failure, if any.

        Only CNI and kernel failures of an undo are absorbed: a programming error in an undo
        (a ``TypeError``) propagates like any other bug.
        """
        absorbed: tuple[type[BaseException], ...] = (CniError, *failures())
        while self._steps:
            what, undo, args = self._steps.pop()
            try:
                undo(*args)
            except absorbed as exc:
                log.error(f"rollback step '{what}' failed: {exc}")
                if self.first_error is None:
                    self.first_error = exc
        return self.first_error
