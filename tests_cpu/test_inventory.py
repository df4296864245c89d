"""A live slice's inventory: bad ones are rejected naming the field."""
import http.server
import socket
import threading

import pytest

from harness.backends.driver_client import DriverClient, DriverError
from harness.backends.ray_driver import HEAD_PROBE_S
from harness.errors import BadInput
from harness.platform import inventory


@pytest.mark.parametrize("text, field", [
    ('[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "ray_address"),
    ('ray_address = "10.0.0.1:6379"\nplatform = "tpu"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n',
     "field 'platform' must be one of gpu, cpu"),
    ('ray_address = "10.0.0.1"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "field 'ray_address'"),
    ('ray_address = "10.0.0.1:6379"\n', "vm"),
    ('ray_address = "10.0.0.1:65536"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n',
     "field 'ray_address' must end in a port from 1 to 65535, got 65536"),
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


def test_an_inventory_naming_a_port_that_is_open_but_no_ray_head_fails_in_seconds():
    """The dashboard's port (8265) in place of the GCS's (6379) is an easy slip: an HTTP server
    accepts the connection, and ray.init would wait on it for minutes."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as web:
        threading.Thread(target=web.serve_forever, daemon=True).start()
        address = f"127.0.0.1:{web.server_address[1]}"
        said = (f"cannot join the Ray cluster at {address}: something listens there, but not a Ray head: "
                f"no gRPC answer in {HEAD_PROBE_S} s \\(it answered, but not in HTTP/2\\)")
        try:
            with DriverClient([], address, ["vm1", "vm2"]) as driver, pytest.raises(DriverError, match=said):
                driver.request({"do": "nodes"}, timeout=60)
        finally:
            web.shutdown()
