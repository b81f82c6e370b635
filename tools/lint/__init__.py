"""``cnichain lint``: check conflists before they reach ``/etc/cni/net.d``.

Pure (it reads the files it is given and nothing else) and free of typer; ``cli/app.py`` only
parses options and picks a renderer.  ``checks`` holds the rules, ``parsers`` runs each plugin's
own config parser, ``catalog`` knows plugin types, ``findings`` shapes the report.
"""

from cnichain.tools.lint.checks import Options, lint_bytes, lint_file, lint_paths, read_tuning_allowlist
from cnichain.tools.lint.findings import ERROR, WARNING, FileReport, Finding, failed, render_json, render_text

__all__ = ["ERROR", "WARNING", "FileReport", "Finding", "Options", "failed", "lint_bytes", "lint_file",
           "lint_paths", "read_tuning_allowlist", "render_json", "render_text"]
