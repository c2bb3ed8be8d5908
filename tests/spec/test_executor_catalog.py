"""The spec's catalog of executor names and the executor registry say the same names: the spec
validates `executor:` against the catalog without importing a scheduler, and the registry registers
exactly the catalog's built-in names (and keeps an extension's name in the catalog while it is
registered)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cancelctl.errors import SpecError
from cancelctl.spec import executors as catalog
from cancelctl.spec.experiment import ExperimentSpec


def test_the_registry_registers_exactly_the_catalogs_built_in_names():
    code = textwrap.dedent(
        """
        import sys
        from cancelctl.spec import executors as catalog
        from cancelctl.executors import registry
        assert tuple(registry._REGISTRY) == catalog.BUILT_IN_EXECUTORS, (registry._REGISTRY, catalog.BUILT_IN_EXECUTORS)
        assert registry.executor_names() == catalog.executor_names() == list(catalog.BUILT_IN_EXECUTORS)
        assert registry.DEFAULT_EXECUTOR == catalog.DEFAULT_EXECUTOR in catalog.BUILT_IN_EXECUTORS
        for name in catalog.BUILT_IN_EXECUTORS:
            assert type(registry.get_executor(name)).name == name
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)  # a fresh process: no extension registered


def test_validating_an_executor_imports_no_executor():
    code = textwrap.dedent(
        """
        import sys
        from cancelctl.spec.experiment import ExperimentSpec
        ExperimentSpec.model_validate({"executor": "slurm"})
        loaded = sorted(m for m in sys.modules if m.startswith("cancelctl.executors") or m == "submitit")
        assert loaded == [], loaded
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_registered_executor_is_in_the_catalog_until_unregistered():
    from cancelctl.executors import register_executor, unregister_executor

    register_executor("k8s-test", "cancelctl.executors.debug:DebugExecutor")
    try:
        assert catalog.executor_names()[-1] == "k8s-test"
        assert ExperimentSpec.model_validate({"executor": "k8s-test"}).executor == "k8s-test"
    finally:
        unregister_executor("k8s-test")
    assert "k8s-test" not in catalog.executor_names()
    with pytest.raises(ValueError, match="Input should be 'local', 'slurm' or 'debug'"):
        ExperimentSpec.model_validate({"executor": "k8s-test"})
    with pytest.raises(SpecError, match="expected 'local', 'slurm' or 'debug'"):
        from cancelctl.executors import get_executor

        get_executor("k8s-test")
