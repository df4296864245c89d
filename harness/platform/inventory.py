"""A live slice's inventory (TOML): where its Ray cluster is and what its VMs have. Written by
`python -m harness live up` (with the measured links and how SSH reaches the VMs), or by hand:

    name = "my-slice"                 # optional
    ray_address = "10.0.0.1:6379"     # the Ray head, on VM1
    platform = "gpu"                  # optional: gpu (default) or cpu
    hosts = "/path/to/hosts.toml"     # optional: the VMs over SSH (then pytest may run anywhere)
    [[vm]]
    name = "vm1"                      # the VM's Ray custom resource, as the harness starts nodes
    site = "UTAH"
    gpus = 2
    gpu = "RTX6000"                   # or gpu_type
    [[link]]                          # optional: a pair as `live up` measured it
    a = "vm1"
    b = "vm2"
    rtt_ms = 20.4

The RTTs in it are what `live up` measured; the trials measure their own between the VMs' Ray actors.
"""
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import schemas
from harness.errors import BadInput
from harness.platform import slices


@dataclass(frozen=True)
class Inventory:
    slice: slices.Slice
    ray_address: str
    platform: str
    hosts: str | None  # the hosts file, where `live up` wrote the inventory
    links: tuple = ()  # the [[link]] tables, as written
    timeouts: dict | None = None


def load(path: str) -> Inventory:
    """The inventory file at path (inventory.schema.json); BadInput naming the field unless it conforms."""
    p = Path(path)
    try:
        inv = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"slice inventory {path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"slice inventory {path}: not valid TOML ({e})") from None
    schemas.check(inv, "inventory", f"slice inventory {path}")
    port = int(inv["ray_address"].rpartition(":")[2])
    if not 1 <= port <= 65535:
        raise BadInput(f"slice inventory {path}: field 'ray_address' must end in a port from 1 to 65535, got {port}")
    vms = [{"name": vm["name"], "site": vm["site"], "gpus": vm["gpus"], "gpu": vm.get("gpu", vm.get("gpu_type"))}
           for vm in inv["vm"]]
    sl = slices.from_document({"name": inv.get("name", p.stem), "network": "live", "rtt_ms": 0.0, "vm": vms},
                              f"{path} (inventory)")
    hosts = inv.get("hosts")
    if hosts is not None and not Path(hosts).is_file():
        raise BadInput(f"slice inventory {path}: field 'hosts' names {hosts}, which is not a file")
    return Inventory(sl, inv["ray_address"], inv.get("platform", "gpu"), hosts, tuple(inv.get("link", ())),
                     inv.get("timeouts"))
