"""A tiny per-network log: quiet unless the network config asks for it.

The stdlib ``logging`` package is deliberately not used: it costs several milliseconds of import on
every plugin exec, and a plugin writes at most a handful of lines.  Configure with
``"log": {"file": "/var/log/cni/cnichain.log", "level": "info"}`` in the plugin's config.
"""

from __future__ import annotations

import os
import sys
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "off": 100}


class Log:
    def __init__(self) -> None:
        self.path = ""
        self.level = LEVELS["off"]
        self.tag = ""

    def configure(self, conf: object, tag: str) -> None:
        """Read the ``log`` key of a network config; a bad value leaves logging off."""
        self.tag = tag
        if not isinstance(conf, dict):
            return
        path = conf.get("file")
        level = str(conf.get("level", "info")).lower()
        if isinstance(path, str) and path.startswith("/") and "\0" not in path:
            self.path = path
            self.level = LEVELS.get(level, LEVELS["info"])

    def enabled(self, level: str) -> bool:
        return bool(self.path) and LEVELS[level] >= self.level

    def write(self, level: str, message: str) -> None:
        if not self.enabled(level):
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        line = f"{stamp} {level.upper()} {self.tag}[{os.getpid()}] {message}\n"
        try:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except OSError as exc:  # logging must never fail a plugin
            print(f"cnichain: cannot write log {self.path}: {exc}", file=sys.stderr)

    def debug(self, message: str) -> None:
        self.write("debug", message)

    def info(self, message: str) -> None:
        self.write("info", message)

    def warning(self, message: str) -> None:
        self.write("warning", message)

    def error(self, message: str) -> None:
        self.write("error", message)

    def skipped(self, command: str, what: list[str] | tuple[str, ...]) -> None:
        """A command that carried on without parts of the config ADD would refuse says so: on
        stderr (runtimes keep a plugin's stderr) and in the log when one is configured."""
        if not what:
            return
        message = f"{self.tag or 'cnichain'} {command}: skipped what ADD would refuse: {'; '.join(what)}"
        if command == "STATUS":  # polled every few seconds (containerd 2.1): the log only, not stderr
            self.write("warning", message)
        else:
            self.notice(message)

    def notice(self, message: str) -> None:
        """A warning the operator must be able to find without a configured log: on stderr
        (runtimes keep a plugin's stderr) and in the log when one is configured."""
        print(message, file=sys.stderr)
        self.write("warning", message)


log = Log()
