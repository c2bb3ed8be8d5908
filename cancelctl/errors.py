"""User-facing input errors: each names file:line:col, the dotted field path and what was expected.

The CLI prints them on one screen and exits 2; nothing is submitted when one is raised.
"""

from __future__ import annotations

from dataclasses import dataclass

from cancelctl.yamlpos import Location


@dataclass(frozen=True)
class SpecIssue:
    location: Location | None
    path: str  # dotted path inside the file, e.g. "arms.gspo.algorithm.loss"
    message: str
    context: str = ""  # e.g. "arm 'gspo', rollout.G=4"

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        field = f"{self.path}: " if self.path else ""
        ctx = f"  [{self.context}]" if self.context else ""
        return f"{where}{field}{self.message}{ctx}"


class SpecError(Exception):
    """Bad input (spec file or arguments). Exit code 2."""

    exit_code = 2

    def __init__(self, issues: list[SpecIssue] | SpecIssue | str, title: str = "invalid experiment spec"):
        if isinstance(issues, str):
            issues = [SpecIssue(None, "", issues)]
        elif isinstance(issues, SpecIssue):
            issues = [issues]
        self.issues = list(issues)
        self.title = title
        super().__init__(self.render())

    def render(self, limit: int = 20) -> str:
        lines = [str(i) for i in self.issues[:limit]]
        if len(self.issues) > limit:
            lines.append(f"... and {len(self.issues) - limit} more")
        return "\n".join(lines)


class UnmatchedArmsError(SpecError):
    """Arms in one comparison group differ in compute (SPEC: compute-matched protocol)."""

    def __init__(self, issues: list[SpecIssue]):
        super().__init__(issues, title="arms are not compute-matched (pass --allow-unmatched to run anyway)")
