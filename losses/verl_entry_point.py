"""What makes verl load the loss plugin, checked without importing verl (~11 CPU-s a process): the
`verl.plugins` entry point in the installed metadata and the VERL_USE_EXTERNAL_PLUGINS policy.
The job checks these before it starts verl; the rest (the plugin imported, ppo_loss wrapped, every
`cancel_*` loss registered: `losses.verl_plugin.assert_active`) needs verl imported."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

ENTRY_POINT = ("cancelctl", "losses.verl_plugin")  # pyproject [project.entry-points."verl.plugins"]


class PluginNotActive(RuntimeError):
    """The cancel_* losses or the group-aware ppo_loss are missing from verl in this process."""


def assert_declared() -> None:
    """verl's plugin discovery will import the plugin (verl/__init__.py: entry points of group
    `verl.plugins`, filtered by VERL_USE_EXTERNAL_PLUGINS). Raises PluginNotActive with the fix."""
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    allowed = policy == "auto" or ENTRY_POINT[0] in {p.strip() for p in policy.split(",")}
    if not allowed:
        raise PluginNotActive(
            f"verl will not load the cancelctl loss plugin because VERL_USE_EXTERNAL_PLUGINS={policy!r}; "
            f"fix: unset it or include '{ENTRY_POINT[0]}'."
        )
    declared = [ep.value for ep in entry_points(group="verl.plugins") if ep.name == ENTRY_POINT[0]]
    if declared != [ENTRY_POINT[1]]:
        raise PluginNotActive(
            f"the verl.plugins entry point '{ENTRY_POINT[0]} = {ENTRY_POINT[1]}' is not installed "
            f"(found {declared}), so verl's workers would not see the cancel_* losses; "
            "fix: pip install -e . (or pip install cancelctl) in the job's environment."
        )
