"""The README stays a front door and the docs stay inside the repository.

The README holds what a newcomer needs first (what cnichain is, the two set-up commands, where to
read on); the reference text lives in docs/.  Every relative link and anchor in the Markdown
resolves, every page of docs/ is reachable from the README, each plugin of the registry has its
section in docs/plugins.md, and no file points at a document outside the checkout.
"""

from __future__ import annotations

import os
import re

from cnichain.plugins import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
README_MAX_BYTES = 10_000  # bytes: a front door, not a manual

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PARENT_PATH = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.-]+(?:/[\w.-]+)*)")
SKIP_DIRS = {".git", ".venv", "__pycache__", "results", "build", "dist", "out", "cnichain"}


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _markdown_files() -> list[str]:
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [os.path.join(top, f) for f in files if f.endswith(".md")]
    return sorted(found)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: str) -> set[str]:
    text = re.sub(r"```.*?```", "", _read(path), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, flags=re.M)}


def _shell_lines(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]


def test_readme_is_a_front_door():
    size = os.path.getsize(README)
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move reference text into docs/"


def test_readme_has_the_two_set_up_commands_and_ci_runs_its_test_command():
    commands = _shell_lines(_read(README))
    assert "./run demo" in commands
    tests = [c for c in commands if c.startswith("./run tests")]
    assert tests, "README.md has no ./run tests command"
    ci = [line.strip() for line in _read(os.path.join(ROOT, ".ci", "run")).splitlines()]
    ci_tests = [line.removeprefix("exec ").strip() for line in ci if "./run tests" in line and not line.startswith("#")]
    assert ci_tests and ci_tests[0].startswith(tests[0]), (ci_tests, tests)


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for path in _markdown_files():
        for target in LINK.findall(_read(path)):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            rel = os.path.relpath(path, ROOT)
            if not dest.startswith(ROOT + os.sep) or not os.path.exists(dest):
                broken.append(f"{rel}: {target}")
            elif anchor and dest.endswith(".md") and anchor not in _anchors(dest):
                broken.append(f"{rel}: {target} (no such heading)")
    assert not broken, broken


def test_every_docs_page_is_linked_from_the_readme():
    linked = {os.path.normpath(os.path.join(ROOT, t.partition("#")[0])) for t in LINK.findall(_read(README))}
    pages = [os.path.join(DOCS, f) for f in os.listdir(DOCS) if f.endswith(".md")]
    assert pages
    assert not [p for p in pages if p not in linked]


def test_plugins_doc_has_a_section_per_registered_plugin():
    anchors = _anchors(os.path.join(DOCS, "plugins.md"))
    assert not [t.name for t in registry.TYPES if _slug(t.name) not in anchors]


def test_no_doc_cites_a_path_outside_the_repository():
    outside = []
    for path in _markdown_files():
        for mention in PARENT_PATH.findall(_read(path)):
            dest = os.path.normpath(os.path.join(os.path.dirname(path), mention))
            if not dest.startswith(ROOT + os.sep) or not os.path.exists(dest):
                outside.append(f"{os.path.relpath(path, ROOT)}: {mention}")
    assert not outside, outside


def test_no_file_points_at_the_sessions_reference_material():
    marker = "/".join(("..", "shared", ""))  # spelled in pieces so this file does not match itself
    hits = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = os.path.join(top, name)
            if os.path.islink(path) or not name.endswith((".md", ".py", ".sh", ".toml", ".yaml", ".ini", ".c")):
                continue
            if marker in _read(path):
                hits.append(os.path.relpath(path, ROOT))
    assert not hits, hits
