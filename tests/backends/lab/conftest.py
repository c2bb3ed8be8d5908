import pytest


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory):
    """One warm-start cache for the whole session: the fast spec's warm start is trained once."""
    return tmp_path_factory.mktemp("lab-warmstart-cache")
