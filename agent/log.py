"""The agent's request log: one timestamped line per event, to a file or stderr.

Not the ``logging`` module: the log is written only by the single-threaded server loop, and a
worker flushes nothing into it (the server flushes before every fork so no buffered line is
written twice).  A failing log never stops the agent.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO


class AgentLog:
    def __init__(self) -> None:
        self._fh: Optional[TextIO] = None

    def open(self, path: str) -> None:
        """Append to ``path`` (created 0600) instead of stderr."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._fh = os.fdopen(fd, "a", buffering=1)

    def __call__(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        line = f"{stamp} cnichain-agent[{os.getpid()}] {message}\n"
        stream = self._fh if self._fh is not None else sys.stderr
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):
            pass

    def flush_before_fork(self) -> None:
        """Empty every buffer a forked child would otherwise inherit and write again."""
        sys.stdout.flush()
        sys.stderr.flush()
        if self._fh is not None:
            self._fh.flush()
