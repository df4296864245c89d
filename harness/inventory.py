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

from harness import slices
from harness.errors import BadInput


def load(path: str) -> tuple[slices.Slice, str, str]:
    """(the slice, the Ray address, the platform) of an inventory file."""
    p = Path(path)
    try:
        inv = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"slice inventory {path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"slice inventory {path}: not valid TOML ({e})") from None
    address = inv.get("ray_address")
    if not isinstance(address, str) or ":" not in address:
        raise BadInput(f"slice inventory {path}: field ray_address: expected 'host:port' of the Ray head")
    platform = inv.get("platform", "gpu")
    if platform not in ("gpu", "cpu"):
        raise BadInput(f"slice inventory {path}: field platform: expected 'gpu' or 'cpu', got {platform!r}")
    vms = inv.get("vm")
    if not isinstance(vms, list) or not vms:
        raise BadInput(f"slice inventory {path}: field vm: expected one [[vm]] table per VM")
    lines = [f'name = "{inv.get("name", p.stem)}"', 'network = "live"', "rtt_ms = 0.0"]
    for i, vm in enumerate(vms):
        if not isinstance(vm, dict):
            raise BadInput(f"slice inventory {path}: field vm[{i}]: expected a table")
        gpu = vm.get("gpu", vm.get("gpu_type"))
        lines += ["[[vm]]"] + [f"{k} = {v!r}".replace("'", '"') for k, v in
                               (("name", vm.get("name")), ("site", vm.get("site")), ("gpus", vm.get("gpus")),
                                ("gpu", gpu)) if v is not None]
    return slices.parse("\n".join(lines), f"{path} (inventory)"), address, platform
