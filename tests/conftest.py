import shutil
from pathlib import Path

import pytest


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
