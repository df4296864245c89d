"""A live slice's inventory: bad ones are rejected naming the field."""
import socket

import pytest

from harness import inventory
from harness.cluster.driver_client import DriverClient, DriverError
from harness.errors import BadInput


@pytest.mark.parametrize("text, field", [
    ('[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "ray_address"),
    ('ray_address = "10.0.0.1:6379"\nplatform = "tpu"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n',
     "field 'platform' must be one of gpu, cpu"),
    ('ray_address = "10.0.0.1"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "field 'ray_address'"),
    ('ray_address = "10.0.0.1:6379"\n', "vm"),
    ('ray_address = "10.0.0.1:6379"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "Z80"\n', "gpu"),
])
def test_bad_inventory_names_the_field(tmp_path, text, field):
    path = tmp_path / "inv.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=field):
        inventory.load(str(path))


def test_an_inventory_naming_a_port_where_no_ray_head_listens_fails_in_seconds():
    """ray.init alone retries such an address for minutes; the driver tries the port first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # free once closed: nothing listens there
    said = f"cannot join the Ray cluster at {address}: no Ray head answers there .ConnectionRefusedError"
    with DriverClient([], address, ["vm1", "vm2"]) as driver, pytest.raises(DriverError, match=said):
        driver.request({"do": "nodes"}, timeout=60)
