"""What ``cnichain lint`` reports, and how: one record per problem, rendered for people or for CI.

Kept apart from the checks so the catalogue tests can compare findings as data and the CLI layer
only chooses a renderer.  A finding names the file, the plugin's index in ``plugins`` (None for
the list itself), the key in dotted form, the message (the plugin's own words where the plugin
would fail) and a fix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR fails the lint; WARNING does not
    message: str
    plugin: Optional[int] = None  # index in "plugins"; None for the list or the file
    plugin_type: str = ""
    key: str = ""  # dotted path inside the plugin entry (or the list), "" when none applies
    fix: str = ""
    line: Optional[int] = None  # JSON syntax errors only
    column: Optional[int] = None


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]


def failed(reports: list[FileReport]) -> bool:
    """Lint fails on errors only; warnings are advice."""
    return any(r.errors for r in reports)


def _where(f: Finding) -> str:
    parts = []
    if f.line is not None:
        parts.append(f"line {f.line} column {f.column}")
    if f.plugin is not None:
        parts.append(f"plugins[{f.plugin}]" + (f" ({f.plugin_type})" if f.plugin_type else ""))
    if f.key:
        parts.append(f.key)
    return " ".join(parts)


def render_text(reports: list[FileReport]) -> str:
    """``FILE: error: plugins[1] (bandwidth) ingressBurst: <message>`` plus an indented fix line."""
    lines: list[str] = []
    for r in reports:
        if not r.findings:
            lines.append(f"{r.path}: ok")
            continue
        for f in r.findings:
            where = _where(f)
            lines.append(f"{r.path}: {f.severity}: {where + ': ' if where else ''}{f.message}")
            if f.fix:
                lines.append(f"    fix: {f.fix}")
    errors = sum(len(r.errors) for r in reports)
    warnings = sum(len(r.warnings) for r in reports)
    lines.append(f"{len(reports)} file(s), {errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def render_json(reports: list[FileReport]) -> str:
    """A stable document for CI: every finding with its fields, plus totals."""
    doc = {
        "files": [
            {
                "path": r.path,
                "errors": len(r.errors),
                "warnings": len(r.warnings),
                "findings": [asdict(f) for f in r.findings],
            }
            for r in reports
        ],
        "errors": sum(len(r.errors) for r in reports),
        "warnings": sum(len(r.warnings) for r in reports),
    }
    return json.dumps(doc, indent=2)
