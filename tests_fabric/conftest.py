import tomllib

import pytest


@pytest.fixture(scope="session")
def inventory(pytestconfig):
    """The live slice: `ray_address` and one [[vm]] table per VM (name, site, gpus, gpu_type)."""
    path = pytestconfig.getoption("--slice-inventory")
    with open(path, "rb") as f:
        inv = tomllib.load(f)
    for field in ("ray_address", "vm"):
        if field not in inv:
            pytest.fail(f"slice inventory {path}: missing field {field!r}")
    return inv
