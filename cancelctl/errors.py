"""The project's errors, as the CLI's one handler (`cancelctl.cli.common.VerbGroup.invoke`) shows them:

    SpecError          bad input: file:line:col, the dotted field path and what was expected; exit 2,
                       nothing submitted (ArgumentError: a command-line argument or a name given there)
    CancelctlError     a runtime failure (the scheduler, the work dir, the tracking store, a missing
                       extra): its message says what failed and what to do; exit 1
    OSError            an OS error met on the work dir: `os_error_message`'s screen; exit 1
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from cancelctl.spec.yamlpos import Location


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
        self.issues = [SpecIssue(None, "", i) if isinstance(i, str) else i for i in issues]
        self.title = title
        super().__init__(self.render())

    def render(self, limit: int = 20) -> str:
        lines = [str(i) for i in self.issues[:limit]]
        if len(self.issues) > limit:
            lines.append(f"... and {len(self.issues) - limit} more")
        return "\n".join(lines)


class UnmatchedArmsError(SpecError):
    """Arms in one comparison group differ in compute (docs/statistics.md#compute-matched-protocol): planned,
    when a sweep is loaded, or logged, when it is reported. Exit code 2."""

    def __init__(self, issues: list[SpecIssue] | list[str],
                 title: str = "arms are not compute-matched (pass --allow-unmatched to run anyway)"):
        super().__init__(list(issues), title=title)


class ArgumentError(SpecError):
    """A command-line argument is wrong (an option value, a run or metric name). Exit code 2."""

    def __init__(self, issues: list[SpecIssue] | SpecIssue | str, title: str = "invalid argument"):
        super().__init__(issues, title=title)


class SweepNotFound(ArgumentError, FileNotFoundError):
    """No sweep of that name in the work dir (never run there). Exit code 2."""

    def __init__(self, message: str):
        super().__init__(message, title="unknown sweep")


class CancelctlError(Exception):
    """A runtime failure the CLI shows as one line naming what failed and what to do. Exit code 1."""

    exit_code = 1


class WorkdirStateError(CancelctlError):
    """A file of the work dir is unreadable (truncated, empty, deleted) or cannot be written (disk
    full, read-only): the message names the path, the cause and how to recover. Exit code 1."""

    exit_code = 1


class SchedulerError(CancelctlError, RuntimeError):
    """A scheduler command failed, timed out or is missing (exit 1 at the CLI)."""


_OS_ERROR_HINTS = {
    errno.ENOSPC: "free space there (or pass --workdir elsewhere), then rerun; runs that failed on it resume with --retry-failed",
    errno.EDQUOT: "your disk quota is used up: free space (or pass --workdir elsewhere), then rerun with --retry-failed",
    errno.EROFS: "the file system is read-only: pass --workdir (or set $CANCELCTL_WORKDIR) to a writable place",
    errno.EACCES: "no permission to write there: fix its permissions or pass --workdir elsewhere",
    errno.EPERM: "no permission to write there: fix its permissions or pass --workdir elsewhere",
}


def os_error_message(exc: OSError) -> str:
    """One screen for an OS error met on the work dir: the cause, the path, what to do."""
    # an OSError raised with a message of ours (TimeoutError, LockBusy, ConnectionError) has no
    # strerror: its message is the cause, never only its class name
    cause = exc.strerror or str(exc) or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    hint = _OS_ERROR_HINTS.get(exc.errno or -1)
    return f"{cause}{where}" + (f" — {hint}" if hint else "")
