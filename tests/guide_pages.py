"""The user's documentation: README.md, then the guide's pages under docs/ (mkdocs.yml's nav order),
for the tests that run or check what they say (a plain module: conftest.py names collide across dirs)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from project_paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav lists, in its order (paths relative to docs/)."""
    def walk(entries) -> list[str]:
        out = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            out += walk(value) if isinstance(value, list) else [value]
        return out

    return walk(yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_MkdocsLoader)["nav"])


class _MkdocsLoader(yaml.SafeLoader):
    """A safe loader that reads mkdocs.yml's `!!python/name:` tags (superfences' mermaid format) as
    plain strings instead of importing what they name."""


_MkdocsLoader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)


def guide_files() -> list[Path]:
    """README.md, then every page of docs/: those in the nav in its order, any other after them."""
    pages = [DOCS / page for page in nav_pages()]
    return [README, *pages, *sorted(p for p in DOCS.rglob("*.md") if p not in pages)]


def guide_text() -> str:
    """README.md and every page of docs/, one text."""
    return "\n".join(path.read_text() for path in guide_files())


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs' toc and GitHub both make it for the headings used here."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks)."""
    return {slug(line.lstrip("#")) for line in outside_code(path.read_text()) if re.match(r"#{1,6} ", line)}


def outside_code(text: str) -> list[str]:
    """A page's lines outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines
