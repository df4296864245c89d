"""Which worker processes an emulated VM runs, and on which of this machine's GPUs.

A VM is one process holding its GPUs, as on a real slice, when this machine has a GPU for every
emulated one. When it has fewer (one H100 for a slice of 2 VMs x 2 GPUs), every emulated GPU becomes
a process of its own, given a share of a physical GPU: one JAX process cannot hold two devices on
one GPU, but two processes can each hold one. The techniques take a VM to be its processes together
(techniques.common.make_mesh), so the mesh is the same either way.

On GPUs, NCCL must see each emulated VM as a host of its own, so that every byte between VMs
crosses the delayed link, while a VM's own GPUs talk as a VM's GPUs do:
- NCCL_HOSTID: one per VM. NCCL's shared-memory and CUDA IPC transports join only ranks of one
  host, so between VMs it has nothing but its socket transport, and inside a VM it takes what
  a real VM's GPUs take. Where two processes of one VM share a physical GPU (one GPU for a
  slice), each process is a host of its own, since NCCL refuses two ranks of one host on one GPU
  ("Duplicate GPU detected"; NCCL's maintainers: ranks sharing a GPU cannot be supported); their
  traffic then goes over TCP inside the VM's namespace, never over the link (sharing(), and
  records, say which).
- NCCL_SOCKET_IFNAME=^lo: the socket transport binds to the namespace's own link (inside a VM's
  namespace, every interface but loopback is its link to the others).
A shared GPU's memory is split evenly over the emulated GPUs on it, with preallocation off:
XLA_PYTHON_CLIENT_MEM_FRACTION is SHARED_MEMORY over them. A VM takes part in its slice's all-VM
group and in its own one-VM group, each its own processes; XLA's allocator keeps what it took until
its process exits (parking a step's state frees buffers to that pool, not to the GPU), so on shared
GPUs one group holds them at a time: the runner releases the others first
(Cluster.one_group_at_a_time), at the price of compiling a group's steps again when it comes back.

`CPU_SPLIT` runs the same split on CPU devices (one process per device), so the path is tested
where no GPU is.
"""
import math
import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

SHARED_MEMORY = 0.9  # of a shared GPU, for the processes together; the rest is the CUDA context's

NCCL_OVER_THE_LINK = {"NCCL_SOCKET_IFNAME": "^lo"}


@dataclass(frozen=True)
class Process:
    """One worker process of a VM: how many devices JAX sees in it, and its environment."""
    devices: int
    env: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"devices": self.devices, "env": self.env}

    @classmethod
    def from_dict(cls, d: dict) -> "Process":
        return cls(d["devices"], d.get("env", {}))


def visible_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES names them, found without starting CUDA (a JAX
    client in this process would take the memory the workers need). A CUDA_VISIBLE_DEVICES set
    by the user is honoured."""
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None:
        return [g.strip() for g in chosen.split(",") if g.strip() and g.strip() != "-1"]
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        return [str(i) for i, line in enumerate(line for line in listing.splitlines() if line.startswith("GPU "))]
    except (OSError, subprocess.TimeoutExpired):
        pass
    proc = Path("/proc/driver/nvidia/gpus")
    return [str(i) for i in range(len(list(proc.iterdir())))] if proc.is_dir() else []


def one_per_vm(vms: list[tuple[str, int]]) -> dict[str, list[Process]]:
    """Each VM one process with all its devices, environment untouched: a live slice's layout."""
    return {name: [Process(gpus)] for name, gpus in vms}


def cpu(vms: list[tuple[str, int]], split: bool = False) -> dict[str, list[Process]]:
    """The scale model: a VM's GPUs are CPU devices of its process, or with split one process each."""
    return {name: [Process(1)] * gpus if split else [Process(gpus)] for name, gpus in vms}


def gpu(vms: list[tuple[str, int]], physical: list[str]) -> dict[str, list[Process]]:
    """vms: (name, GPUs) in slice order; physical: this machine's GPUs (visible_gpus())."""
    if not physical:
        raise ValueError("no GPU on this machine to lay the emulated VMs' GPUs on")
    need = sum(gpus for _, gpus in vms)
    if len(physical) >= need:
        out, first = {}, 0
        for name, gpus in vms:
            out[name] = [Process(gpus, {**NCCL_OVER_THE_LINK, "NCCL_HOSTID": name,
                                        "CUDA_VISIBLE_DEVICES": ",".join(physical[first:first + gpus])})]
            first += gpus
        return out
    on = [physical[g % len(physical)] for g in range(need)]  # emulated GPU g -> physical GPU
    sharers = Counter(on)
    out, g = {}, 0
    for name, gpus in vms:
        mine = on[g:g + gpus]
        one_host = len(set(mine)) == len(mine)  # NCCL takes one host's ranks on distinct GPUs only
        out[name] = []
        for k in range(gpus):
            fraction = math.floor(1000 * SHARED_MEMORY / sharers[on[g]]) / 1000  # never over
            out[name].append(Process(1, {**NCCL_OVER_THE_LINK, "NCCL_HOSTID": name if one_host else f"{name}.{k}",
                                         "CUDA_VISIBLE_DEVICES": on[g],
                                         "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                                         "XLA_PYTHON_CLIENT_MEM_FRACTION": str(fraction)}))
            g += 1
    return out


def sharing(layout: dict[str, list[Process]], vms: list[str]) -> dict | None:
    """For a record: each of vms' processes' physical GPU, memory fraction and NCCL host, where GPUs
    are shared; None where they are not. Processes of one VM under one host talk as a VM's GPUs;
    under hosts of their own, over TCP inside the VM."""
    if not any("XLA_PYTHON_CLIENT_MEM_FRACTION" in p.env for vm in vms for p in layout[vm]):
        return None
    return {vm: [{"gpu": p.env["CUDA_VISIBLE_DEVICES"], "memory_fraction": float(p.env["XLA_PYTHON_CLIENT_MEM_FRACTION"]),
                  "nccl_host": p.env["NCCL_HOSTID"]}
                 for p in layout[vm]] for vm in vms}


def facts(layout: dict[str, list[Process]], vms: list[str]) -> dict:
    """What a record says of vms' processes (harness.backends.contract.Cluster.facts)."""
    return {"processes_per_host": len(layout[vms[0]]), "gpu_sharing": sharing(layout, vms)}
