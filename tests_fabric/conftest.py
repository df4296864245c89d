import pytest

from harness.suite.backends import live_slice as load_live_slice


@pytest.fixture(scope="session")
def live_slice(pytestconfig):
    """(slice, Ray address, platform) of the live slice described by --slice-inventory."""
    return load_live_slice(pytestconfig)
