"""What an install or an uninstall did, path by path: the one report both install paths return
(``cnichain install`` of the launchers, :mod:`.launchers`; ``cnichain node install`` of the
bundled tree, :mod:`.bundle_install`) and the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class InstallReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # byte-identical already: not rewritten
    refused: list[str] = field(default_factory=list)  # not ours (or changed since): left alone
    removed: list[str] = field(default_factory=list)  # uninstalled, or old versions pruned
    verified: list[str] = field(default_factory=list)  # executables that answered VERSION
    notes: list[str] = field(default_factory=list)  # what else the operator should know
