import pytest

from harness import inventory


@pytest.fixture(scope="session")
def live_slice(pytestconfig):
    """(slice, Ray address, platform) of the live slice described by --slice-inventory."""
    return inventory.load(pytestconfig.getoption("--slice-inventory"))
