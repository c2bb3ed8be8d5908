"""The backend registry (`cancelctl.backends.registry`): the built-in backends by name, each a `Backend`;
naming one imports nothing heavy (the lab path never imports verl); an unknown name is refused with
the known ones; a registration replaces a name until it is taken back."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from project_paths import ROOT

from cancelctl.backends import registry
from cancelctl.backends.lab.backend import LabBackend
from cancelctl.backends.protocol import Backend, BaseBackend
from cancelctl.errors import ArgumentError
from cancelctl.spec import backends as catalog


def test_the_built_in_backends_are_registered_by_name_and_implement_the_protocol():
    assert registry.backend_names()[:2] == ["lab", "verl"] == list(catalog.BUILT_IN_BACKENDS)
    for name in ("lab", "verl"):
        backend = registry.get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
        assert registry.get_backend(name) is backend  # one instance per process


def test_an_unknown_backend_is_an_argument_error_naming_the_known_ones():
    with pytest.raises(ArgumentError) as refused:
        registry.get_backend("trl")
    assert refused.value.exit_code == 2
    assert str(refused.value) == "backend 'trl': expected 'lab' or 'verl'"


def test_a_registration_replaces_a_name_until_taken_back():
    class Quiet(BaseBackend):
        name, default_lr = "quiet", 0.1

    registry.register("quiet", Quiet)
    try:
        assert "quiet" in registry.backend_names() and isinstance(registry.get_backend("quiet"), Quiet)
        registry.register("lab", Quiet)
        assert isinstance(registry.get_backend("lab"), Quiet)
    finally:
        registry.unregister("quiet")
        registry.unregister("lab")
    assert "quiet" not in registry.backend_names() and type(registry.get_backend("lab")) is LabBackend


def test_the_lab_path_imports_no_verl_and_planning_no_torch():
    """A lab sweep validated, planned (its time limit on SLURM included) and rendered: no verl module,
    no verl backend module, and no torch is imported."""
    code = textwrap.dedent(
        """
        import sys
        from cancelctl.backends.plan_rows import plan_rows
        from cancelctl.backends.registry import get_backend
        from cancelctl.spec.expand import load_sweep
        sweep = load_sweep(sys.argv[1])
        rows = plan_rows(sweep)
        run = sweep.runs[0]
        get_backend(run.spec.backend).rendered_run(run)
        from cancelctl.jobs.time_limit import time_limit_plan
        assert time_limit_plan(run).allocations is not None  # the lab's step cost was asked
        loaded = [m for m in sys.modules if m.split(".")[0] in ("verl", "torch") or m.startswith("cancelctl.backends.verl")]
        assert not loaded, loaded
        """
    )
    subprocess.run([sys.executable, "-c", code, str(ROOT / "experiments" / "lab-demo.yaml")], check=True, timeout=120)
