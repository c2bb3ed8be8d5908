import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

# One console width for every test, terminal or not, serial or in an xdist worker (which may be given
# a narrow one): tables are asserted on their words, and rich cuts words to fit the width.
os.environ["COLUMNS"] = "160"

VERL_MISSING = "the verl extra (verl, Hydra, Ray) is not installed: pip install -e '.[verl]' (README line 2 installs the test extra only)"


# Tests that hold one of the machine's shared, bounded resources — the SLURM cluster a test run was
# given (its slots; `squeue` seen by every test), a Ray cluster, a whole verl run (~5 GiB, ~16
# processes) — run one after another in one xdist worker (`--dist loadgroup`), whatever -n is: the
# files below, `slurm`-marked tests, and tests marked `machine` (a whole verl run outside them).
MACHINE_GROUP = "machine"
MACHINE_FILES = ("tests/slurm/", "tests/jobs/test_raycluster.py", "tests/backends/verl/test_verl_cpu_main_ppo.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """README promises the verl tests skip where verl is missing: every `verl`-marked test (one that
    needs the verl extra: verl, Hydra, Ray, TransferQueue) does, whatever it imports. CI runs them
    after line 2 with `pytest -m verl`, so a test needing the extra must carry the marker."""
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).relative_to(root).as_posix()
        held = item.get_closest_marker("slurm") or item.get_closest_marker(MACHINE_GROUP)
        if held is not None or where.startswith(MACHINE_FILES):
            item.add_marker(pytest.mark.xdist_group(MACHINE_GROUP))
    if importlib.util.find_spec("verl") is not None:
        return
    for item in items:
        if item.get_closest_marker("verl") is not None:
            item.add_marker(pytest.mark.skip(reason=VERL_MISSING))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """`--dist loadgroup` keeps a group on one worker only if xdist's `@group` suffix reached the node
    ids (xdist 3.8 writes `item._nodeid`, which pytest 9.2 no longer reads; and xdist reads the groups
    before a later hook adds them, hence tryfirst above). Both spread every group over both workers:
    whole verl runs beside the SLURM e2e's three. A worker that lost its groups stops the run."""
    config = session.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):  # set in workers by xdist
        return
    lost = [item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        message = (f"pytest-xdist did not group {len(lost)} test(s) (e.g. {lost[0]}): their group would run on "
                   "both workers at once; install the pytest the test extra pins (pip install -e '.[test]')")
        print(message, file=sys.__stderr__, flush=True)  # the controller shows only an INTERNALERROR
        raise pytest.UsageError(message)


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "sweep.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """A migrated MLflow sqlite DB: copying it saves the ~3 s schema creation per test."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()  # runs the migrations
    return path


@pytest.fixture
def workdir(tmp_path, template_db) -> Path:
    """An empty work dir whose sqlite MLflow store is already migrated (a copy of template_db)."""
    path = tmp_path / "work"
    path.mkdir()
    shutil.copy(template_db, path / "mlflow.db")
    return path
