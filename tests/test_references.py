"""Nothing in the repository points outside it: every tracked text file's references to the project's
own files name files the repository has (and, for a guide page, a heading it has), none names the
design notes, spec or paper text files a clone does not contain, and none cites a tracker issue by
number — history lives in commit messages. What the code cites instead is the guide (docs/losses.md,
docs/metrics.md, docs/statistics.md, docs/claims.md, docs/bibliography.md) or a paper's equation."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from guide_pages import anchors
from project_paths import ROOT

# Files outside the repository that the code once cited: the project's spec and design notes, the
# session notes, and the papers' text extractions ("000_547586dd52ec63e0.txt").
OUTSIDE = [
    (re.compile(r"\b(?:SPEC|DESIGN)\.md\b"), "the project spec / design notes (not in the repository)"),
    (re.compile(r"(?<![\w-])SPEC\b(?![-_])"), "the project spec (not in the repository): cite a docs/ page"),
    (re.compile(r"\bshared/(?:notes|papers|tools|hooks)\b|\.\./shared/"), "a shared folder outside the repository"),
    (re.compile(r"\bnotes/[\w.-]+\.md\b|\bnotes ?§ ?\d|\bnotes? §\d"), "session notes (not in the repository)"),
    (re.compile(r"\bpapers/|\b\d{3}_(?:[0-9a-f]{16}|\*)\.txt\b"), "a paper's text file: cite the paper's equation"),
]
# "(issue 12)", "issue 35:", "Issue 38.6": the project tracker's history. An upstream project's issue
# is named with its repository ("BytedTsinghua-SIA/DAPO issue 36") and is a source, not history.
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+(?:\.\d+)?\b")
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+\s+$")
# A path into one of the repository's own folders: "docs/losses.md#gspo", "cancelctl/stats/paired.py".
OWN_PATH = re.compile(
    r"(?<![\w./-])((?:docs|cancelctl|losses|tests|benchmarks|experiments|templates|schema|\.ci)/"
    r"[\w./-]*[\w-]\.(?:md|py|yaml|yml|json|sh|txt|j2|png))(#[\w-]+)?"
)
# A path with a wildcard or a placeholder names a family of files, not one file.
TEMPLATED = re.compile(r"[*{}<>]")
BINARY = {".png", ".jpg", ".gif", ".parquet", ".pt", ".db", ".gguf", ".whl", ".pdf", ".ico"}


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the tracked files)")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / name for name in names.decode().split("\0") if name]
    # this file spells out the patterns it looks for (and plants bad references): it is their one home
    return [p for p in paths if p.is_file() and p.suffix not in BINARY and p != Path(__file__).resolve()]


@cache
def headings(page: Path) -> frozenset[str]:
    return frozenset(anchors(page))


def problems(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """What `text` (the content of `path`) points at that the repository at `root` does not have."""
    found = []
    name = path.relative_to(root) if path.is_relative_to(root) else path
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        for pattern, why in OUTSIDE:
            for match in pattern.finditer(line):
                found.append(f"{where}: {match.group(0)!r}: {why}")
        for match in ISSUE.finditer(line):
            if not UPSTREAM.search(line[: match.start()]):
                found.append(f"{where}: {match.group(0)!r}: a tracker issue (history lives in commit messages)")
        for match in OWN_PATH.finditer(line):
            target, anchor = match.group(1), (match.group(2) or "")[1:]
            if TEMPLATED.search(target):
                continue
            file = root / target
            if not file.exists():
                found.append(f"{where}: {target!r}: no such file in the repository")
            elif anchor and file.suffix == ".md" and anchor not in headings(file):
                found.append(f"{where}: {target}#{anchor}: {target} has no such heading")
    return found


def test_every_reference_is_inside_the_repository():
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += problems(path, text)
    assert not found, "references to what a clone does not contain:\n" + "\n".join(found)


@pytest.mark.parametrize("planted, expected", [
    ('"""The losses (see ../shared/SPEC.md)."""', "SPEC.md"),
    ("# the table of keys is SPEC \"Metric keys\"", "the project spec"),
    ("# verl's balancer (notes/verl-inside.md §1)", "session notes"),
    ("# group ids reach the loss (notes §2)", "session notes"),
    ("Sources: [D] = shared/papers/000_547586dd52ec63e0.txt", "a shared folder"),
    ("# [H] = 004_*.txt, App. D", "a paper's text file"),
    ("# a requeue never re-runs a finished run (issue 12)", "a tracker issue"),
    ('"""Issue 35: a collapse claim read inconclusive."""', "a tracker issue"),
    ("# the clip of docs/losses.md#gspo-clip", "has no such heading"),
    ("# see docs/no-such-page.md", "no such file"),
    ("# cancelctl/stats/no_such_module.py computes it", "no such file"),
])
def test_a_planted_bad_reference_is_found(planted, expected):
    found = problems(ROOT / "planted.py", f"x = 1\n{planted}\n")
    assert found and all(p.startswith("planted.py:2: ") for p in found), found
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("fine", [
    "# [D] eq. 7: the sequence ratio (docs/losses.md#gspo)",
    "# the compute keys (docs/metrics.md#compute); GSPO [D] eq. 42-44",
    "SAME_SPEC = ALL_SPECS + SPEC_ARMS + SPECIALS",
    '"BytedTsinghua-SIA/DAPO issue 36 (the ~100x duplication)"',
    "# stacks in stalls/attempt-N.txt; error.txt's first line",
    "# one file per run: tests/backends/verl/golden/<sweep>__<run>.txt",
    "sqlite:///shared/mlflow.db",
])
def test_what_is_not_flagged(fine):
    assert problems(ROOT / "fine.py", fine) == []
