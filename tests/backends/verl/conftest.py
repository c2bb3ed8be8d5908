import pytest
from verl_helpers import run_maker


@pytest.fixture
def make_run(tmp_path):
    return run_maker(tmp_path)
