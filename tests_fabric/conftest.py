import pytest

from harness.suite.backends import live_slice as load_live_slice


@pytest.fixture(scope="session")
def live_slice(pytestconfig):
    """The live slice's inventory (harness.platform.inventory.Inventory), from --slice-inventory."""
    inv = load_live_slice(pytestconfig)
    if inv is None:
        pytest.skip("no slice inventory: pass --slice-inventory FILE or set HARNESS_SLICE_INVENTORY")
    return inv
