from pathlib import Path

import pytest


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "sweep.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
