"""The one rule for the names that become paths (sweep, arm and run names): the sweep file's
`validate` and every verb that reads or writes the work dir apply the same check."""

from __future__ import annotations

import re

# a sweep's (or arm's) name, as the sweep file writes it: one path component
SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# a file name is at most 255 bytes; a sweep's folders and files add to its name
MAX_NAME_LENGTH = 200


def name_problem(name: object, pattern: re.Pattern[str] | None = SWEEP_NAME) -> str | None:
    """Why `name` cannot be a name (None: it can): one path component (no `/` or `\\`, not `.`/`..`,
    no `..`, no leading dot or dash, no control characters), at most MAX_NAME_LENGTH characters,
    matching `pattern`."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long; at most {MAX_NAME_LENGTH}"
    if name[0] in ".-" or ".." in name or any(c in name for c in "/\\") or not name.isprintable():
        return "must be one path component (no '/', no '..', no leading '.' or '-')"
    if pattern is not None and not pattern.match(name):
        return "must be one path component of letters, digits, '_', '.', '-' (starting with a letter or digit)"
    return None
