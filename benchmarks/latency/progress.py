"""The bench's one status line on stderr: rewritten in place on a terminal, throttled in a log."""

from __future__ import annotations

import sys
import time


class Progress:
    """One status line on stderr, rewritten in place on a terminal."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, text: str, final: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last > 2.0:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
            self._last = now
