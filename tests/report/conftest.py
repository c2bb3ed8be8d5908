import pytest
from report_frames import report_for
from rich.console import Console


@pytest.fixture(scope="session")
def report(tmp_path_factory):
    """The full report (plots, console) on the default synthetic sweep, built once."""
    console = Console(record=True, width=200)
    built = report_for(tmp_path_factory.mktemp("report"), console=console)
    built.console_text = console.export_text()
    return built
