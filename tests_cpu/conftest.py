import pytest

from harness import data
from harness.suite.privileges import require_emulation


@pytest.fixture(scope="session")
def fixture_corpus():
    return data.load_corpus()


@pytest.fixture(scope="module")
def emulation():
    """For tests that bring up emulated slices: skips (fails in CI) without the privileges."""
    require_emulation()
