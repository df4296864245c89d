"""`live provision`: a FABRIC slice made from the slice file the emulator reads, with FABlib
(the optional extra `fabric`), and the hosts file `live up` reads.

Each VM of the slice file becomes a FABRIC node at its site with its GPUs as components; each
site gets a FABNetv4 network (FABRIC's routed IPv4 service, one per site, joined across sites),
which carries the VMs' traffic to each other. SSH goes to the nodes' management addresses
through FABRIC's bastion, with the keys of the user's FABlib configuration.

A dry run checks the request against FABlib's own offline lists (component models, images) with
no credentials and no network. FABlib has no offline list of sites (they need a login to read):
a dry run checks a site's spelling only, and FABRIC itself checks the site on submit.
"""
import contextlib
import sys
from dataclasses import asdict, dataclass, field

from harness.errors import BadInput
from harness.platform.slices import Slice

IMAGE = "default_ubuntu_22"
# FABlib's node defaults (2 cores, 8 GB, 10 GB of disk) hold neither JAX with CUDA nor a Ray node.
CORES, RAM_GB, DISK_GB = 8, 32, 100


@dataclass
class Node:
    name: str
    site: str
    cores: int
    ram_gb: int
    disk_gb: int
    image: str
    gpu_model: str
    gpus: int


@dataclass
class Plan:
    slice: str
    nodes: list[Node]
    networks: list[str] = field(default_factory=list)  # one FABNetv4 per site

    def to_dict(self) -> dict:
        return {"slice": self.slice, "nodes": [asdict(n) for n in self.nodes],
                "networks": [{"type": "FABNetv4", "site": s} for s in self.networks]}


def fablib_constants():
    try:
        from fabrictestbed_extensions.fablib.constants import Constants  # deferred: an optional extra
    except ImportError:
        raise BadInput("live provision needs FABlib: pip install 'fabric-harness[fabric]'") from None
    return Constants


def gpu_model(gpu: str, models) -> str:
    """FABlib's component model for one of the harness's GPU names (T4 is GPU_TeslaT4)."""
    found = [m for m in models if m.startswith("GPU_") and m[4:].removeprefix("Tesla") == gpu]
    if not found:
        offered = sorted(m for m in models if m.startswith("GPU_"))
        raise BadInput(f"GPU {gpu!r} is not a FABRIC component (FABlib offers {', '.join(offered)})")
    return found[0]


def plan(sl: Slice, image: str = IMAGE) -> Plan:
    """What provisioning sl requests, checked against FABlib's offline lists."""
    constants = fablib_constants()
    if image not in constants.IMAGE_NAMES:
        raise BadInput(f"--image: {image!r} is not a FABRIC image (FABlib lists {', '.join(constants.IMAGE_NAMES)})")
    nodes = []
    for vm in sl.vms:
        try:
            model = gpu_model(vm.gpu, constants.COMPONENT_MODELS)
        except BadInput as e:
            raise BadInput(f"{sl.source}: VM {vm.name}: {e}") from None
        nodes.append(Node(vm.name, vm.site, vm.cores or CORES, int(vm.memory_gb or RAM_GB), DISK_GB, image, model,
                          vm.gpus))
    return Plan(sl.name, nodes, sorted({n.site for n in nodes}))


def submit(p: Plan, slice_path: str) -> str:
    """Creates the slice on FABRIC, waits for it, and returns the hosts file's text. Needs the
    user's FABlib configuration (fabric_rc, tokens, keys)."""
    fablib_constants()
    from fabrictestbed_extensions.fablib.fablib import FablibManager  # deferred: an optional extra

    with contextlib.redirect_stdout(sys.stderr):  # FABlib prints its progress; stdout is --json's
        return _submit(FablibManager(), p, slice_path)


def _submit(fablib, p: Plan, slice_path: str) -> str:
    sites = set(fablib.get_site_names())
    unknown = sorted({n.site for n in p.nodes} - sites)
    if unknown:
        raise BadInput(f"{slice_path}: FABRIC has no site {', '.join(unknown)} (it has {', '.join(sorted(sites))})")
    fabric_slice = fablib.new_slice(name=p.slice)
    for n in p.nodes:
        node = fabric_slice.add_node(name=n.name, site=n.site, cores=n.cores, ram=n.ram_gb, disk=n.disk_gb,
                                     image=n.image)
        for i in range(n.gpus):
            node.add_component(model=n.gpu_model, name=f"gpu{i}")
        node.add_fabnet()
    fabric_slice.submit(wait=True)
    lines = [f'slice = "{slice_path}"', f'user = "{fabric_slice.get_node(p.nodes[0].name).get_username()}"',
             f'key = "{fablib.get_default_slice_private_key_file()}"',
             f'jump = "{fablib.get_bastion_username()}@{fablib.get_bastion_host()}"',
             f'jump_key = "{fablib.get_bastion_key_location()}"']
    for n in p.nodes:
        node = fabric_slice.get_node(n.name)
        fabnet = node.get_interface(network_name=f"FABNET_IPv4_{n.site}")
        lines += ["", "[[host]]", f'name = "{n.name}"', f'address = "{node.get_management_ip()}"',
                  f'data_address = "{fabnet.get_ip_addr()}"']
    return "\n".join(lines) + "\n"
