"""The cold-run record: which plugin execs under a bin dir ran their plugin in-process.

A shim that gives up on the agent (no socket, a connect or acknowledgement timeout, a refusal)
runs the plugin cold through its launcher, and the agent's own counters never hear of that
request: only the caller's side can tell that every request ran warm.  :func:`noted` makes every
launcher under a bin dir append "<type> <CNI_COMMAND>" to a log just before it starts the plugin
in-process, and puts the launchers back as they were on exit (so a later install of the same bin
dir finds its own files, not changed ones it must refuse).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

COLD_ENTRY = "from cnichain.plugins."  # the line where an installed launcher starts the plugin in-process


class ColdRuns:
    """The log the noted launchers write; it exists (empty) from the start, so a record that was
    never made -- a wrong path, a launcher that could not write it -- is an error, not "none"."""

    def __init__(self, log: str) -> None:
        self.log = log

    def runs(self) -> list[tuple[str, str]]:
        """(plugin type, CNI command) of each exec that ran cold, in the order they started."""
        with open(self.log) as fh:
            words = fh.read().split()
        return list(zip(words[0::2], words[1::2]))


@contextmanager
def noted(bin_dir: str, log: str) -> Iterator[ColdRuns]:
    """Every launcher under ``bin_dir`` (the native shim's cold launchers included) notes its cold
    runs in ``log`` while the block runs; fails when there is no launcher to note."""
    note = (f"open({log!r}, 'a').write(__import__('os').path.basename(sys.argv[0]) + ' '"
            " + __import__('os').environ.get('CNI_COMMAND', '?') + '\\n')\n").encode()
    entry = COLD_ENTRY.encode()
    with open(log, "w"):
        pass
    originals: dict[str, bytes] = {}
    try:
        for root, _dirs, files in os.walk(bin_dir):
            for name in files:
                launcher = os.path.join(root, name)
                with open(launcher, "rb") as fh:
                    data = fh.read()
                if data.startswith(b"#!") and entry in data:
                    head, _, tail = data.partition(entry)
                    originals[launcher] = data
                    with open(launcher, "wb") as fh:
                        fh.write(head + note + entry + tail)
        assert originals, f"no launcher under {bin_dir} has the cold entry {COLD_ENTRY!r}: the record would see nothing"
        yield ColdRuns(log)
    finally:
        for launcher, data in originals.items():
            with open(launcher, "wb") as fh:
                fh.write(data)
