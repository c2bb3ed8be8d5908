"""docs/layout.md names every module of `cancelctl/` and `losses/`, and no module that does not exist:
a module added, moved or renamed without its line in the guide's Layout page fails here."""

from __future__ import annotations

import re

from guide_pages import DOCS
from project_paths import ROOT

LAYOUT = DOCS / "layout.md"
PACKAGES = ("cancelctl", "losses")
# a module row of a table: "| `cancelctl/backends/verl/render.py` | its job |"
ROW = re.compile(r"^\| `((?:cancelctl|losses)/[\w/]*\.py)` \| (.*) \|$")
# a package's heading: "### `cancelctl/backends/verl/`"
HEADING = re.compile(r"^### `((?:cancelctl|losses)/(?:[\w/]*/)?)`$")


def modules_on_disk() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def packages_on_disk() -> set[str]:
    return {
        path.parent.relative_to(ROOT).as_posix() + "/"
        for package in PACKAGES
        for path in (ROOT / package).rglob("__init__.py")
    }


def test_layout_names_every_module_and_only_modules_that_exist():
    lines = LAYOUT.read_text().splitlines()
    rows = {m.group(1): m.group(2).strip() for m in map(ROW.match, lines) if m}
    named, on_disk = set(rows), modules_on_disk()
    missing, gone = sorted(on_disk - named), sorted(named - on_disk)
    assert not missing and not gone, (
        f"docs/layout.md is behind the code:\n  modules without a row: {missing}\n"
        f"  rows naming no module: {gone}"
    )
    assert all(rows.values()), [name for name, job in rows.items() if not job]  # every row says its job


def test_layout_has_a_section_per_package_and_each_row_under_its_own():
    section, misplaced, sections = None, [], set()
    for line in LAYOUT.read_text().splitlines():
        if heading := HEADING.match(line):
            section = heading.group(1)
            sections.add(section)
        elif row := ROW.match(line):
            if row.group(1).rsplit("/", 1)[0] + "/" != section:
                misplaced.append(f"{row.group(1)} under {section}")
    assert sections == packages_on_disk(), sorted(sections ^ packages_on_disk())
    assert not misplaced, misplaced


def test_no_test_folder_shadows_an_optional_dependency():
    """pytest puts the folder of each test module on sys.path (its default `prepend` import mode), so a
    subfolder there named after an optional dependency (`tests/backends/verl/` beside a test module in
    `tests/backends/`) imports as that package's namespace: `importorskip("verl")` passes without verl
    installed and README line 2's suite errors instead of skipping."""
    optional = {
        match.split(".")[0]
        for path in (ROOT / "tests").rglob("*.py")
        for match in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", path.read_text())
    }
    assert "verl" in optional  # the pattern still finds what the suite skips on
    on_path = {path.parent for path in (ROOT / "tests").rglob("test_*.py")}
    shadowing = sorted(
        f"{(folder / name).relative_to(ROOT)}/ beside test modules in {folder.relative_to(ROOT)}/"
        for folder in on_path for name in optional if (folder / name).is_dir()
    )
    assert not shadowing, shadowing
