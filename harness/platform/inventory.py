"""A live slice's inventory (TOML): where its Ray cluster is and what its VMs have.

    name = "my-slice"                 # optional
    ray_address = "10.0.0.1:6379"     # the Ray head, on VM1
    platform = "gpu"                  # optional: gpu (default) or cpu
    [[vm]]
    name = "vm1"                      # the VM's Ray custom resource, as the harness starts nodes
    site = "UTAH"
    gpus = 2
    gpu = "RTX6000"                   # or gpu_type

RTTs are not in the inventory: the trials measure them between the VMs' Ray actors.
"""
import tomllib
from pathlib import Path

from harness import schemas
from harness.errors import BadInput
from harness.platform import slices


def load(path: str) -> tuple[slices.Slice, str, str]:
    """(the slice, the Ray address, the platform) of an inventory file (inventory.schema.json)."""
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
    return sl, inv["ray_address"], inv.get("platform", "gpu")
