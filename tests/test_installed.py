"""`cancelctl.installed.installed`: the one "is this module installed" check, answered without
importing the module or any package above it."""

from __future__ import annotations

import subprocess
import sys

from cancelctl.installed import installed


def test_installed_modules_and_submodules_are_found_and_missing_ones_are_not():
    assert installed("json") and installed("cancelctl.workdir") and installed("losses.verl_plugin")
    assert not installed("no_such_module_cancelctl") and not installed("cancelctl.no_such_module")
    assert not installed("json.no_such_module")  # a plain module has no submodules


def test_a_dotted_name_is_found_without_importing_its_packages():
    code = ("import sys; from cancelctl.installed import installed; "
            "assert installed('losses.verl_plugin') and installed('cancelctl.backends.verl.planning'); "
            "assert 'losses' not in sys.modules and 'torch' not in sys.modules and 'cancelctl.backends' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
