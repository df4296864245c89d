"""Clusters whose VMs are Ray nodes: an emulated slice (network namespaces joined by the delayed
link, harness.backends.emulation) and a live one (a running Ray cluster on real VMs). Both speak to their
VMs through the Ray driver (harness.backends.ray_driver), which starts each VM's worker servers."""
import contextlib
import shlex
import sys

from harness.backends import layout
from harness.backends.contract import Failed, GroupLost, ServedGroups, VMs
from harness.backends.driver_client import DriverClient, DriverError
from harness.backends.emulation import compute
from harness.backends.emulation.network import EmulatedNetwork
from harness.backends.live import bringup, hosts, links
from harness.backends.ray_nodes import RayCluster
from harness.platform.inventory import Inventory
from harness.platform.slices import Slice, one_shape


class RayDriven(ServedGroups):
    """The groups and RTT probes of a Ray driver; processes: each VM's worker processes
    (harness.backends.layout), None for one per VM holding the GPUs Ray gives it."""

    def __init__(self, driver: DriverClient, devices_per_host: int, platform: str, processes: dict | None = None):
        super().__init__(devices_per_host)
        self.driver, self.platform, self.processes = driver, platform, processes
        self.heartbeat_s: int | None = None  # the workers' heartbeat timeout; None: the worker's default

    def _open(self, vms: VMs) -> None:
        request = {"do": "open", "group": self._name(vms), "vms": list(vms),
                   "devices_per_host": self.devices_per_host, "platform": self.platform}
        if self.heartbeat_s is not None:
            request["heartbeat_s"] = self.heartbeat_s
        if self.processes is not None:
            request["layout"] = {vm: [p.to_dict() for p in self.processes[vm]] for vm in vms}
        try:
            self.driver.request(request)
        except (DriverError, OSError, ValueError) as e:  # a group that cannot start fails its trial
            raise GroupLost(f"opening {self._name(vms)}: {e or type(e).__name__}") from None

    def _call(self, vms: VMs, request: dict, timeout_s: float) -> dict:
        try:
            return self.driver.request({"do": "call", "group": self._name(vms), "timeout": timeout_s,
                                        "request": request})
        except (DriverError, OSError, ValueError) as e:  # OSError, ValueError: the driver process is gone
            raise GroupLost(str(e) or type(e).__name__) from None

    def _close(self, vms: VMs) -> None:
        with contextlib.suppress(DriverError, OSError, ValueError):  # a driver that died has no groups left
            self.driver.request({"do": "close", "group": self._name(vms)})

    @staticmethod
    def _name(vms: VMs) -> str:
        return "+".join(vms)

    def rtt_ms(self, a: str, b: str) -> float:
        try:
            return self.driver.request({"do": "rtt", "a": a, "b": b})
        except DriverError as e:
            raise Failed("error", f"measuring the RTT between {a} and {b}: {e}") from None

    def close(self) -> None:
        self.groups.clear()  # the driver closes its groups itself when its input ends
        self.driver.close()


class EmulatedCluster(RayDriven):
    """A slice's VMs as network namespaces on this machine, one Ray node each; see emulated()."""

    def __init__(self, driver, devices_per_host, platform, processes, network: EmulatedNetwork,
                 quotas: compute.VMQuotas):
        super().__init__(driver, devices_per_host, platform, processes)
        self.one_group_at_a_time = layout.sharing(processes, list(processes)) is not None
        self.network, self.quotas = network, quotas
        self.tcp_buffer_bytes = network.tcp_buffer_bytes
        self.compute_shares = quotas.run_shares if quotas.limited else {}
        self.link_bytes_per_s = network.link_rate()

    def use_slice(self, sl: Slice) -> None:
        self.network.use_slice(sl)
        self.quotas.use_slice(sl.name)

    def counters(self, vms: VMs) -> dict | None:
        if len(vms) < 2:
            return None
        total = {}
        for key, counts in self.network.counters().items():
            if set(key.split(">")) <= set(vms):
                for name, n in counts.items():
                    total[name] = total.get(name, 0) + n
        return total

    def facts(self, vms: VMs) -> dict:
        network = {"mechanism": self.network.mechanism, "link_bytes_per_s": self.link_bytes_per_s,
                   "links": {k: v for k, v in self.network.settings().items() if set(k.split(">")) <= set(vms)}}
        out = {"network": network, **layout.facts(self.processes, list(vms))}
        shares = self.quotas.shares_of(list(vms))
        if shares is not None:
            out["compute_shares"] = shares
        return out


@contextlib.contextmanager
def emulated(slices: list[Slice], platform: str = "cpu", tcp_buffer_bytes: int | None = None,
             split_processes: bool = False, gpu_speeds: bool = False):
    """One emulated cluster for slices that share a shape (VM names and GPUs per VM); on platform
    gpu each emulated VM gets GPUs of this machine, its own or shares of them where there are too
    few (harness.backends.layout). tcp_buffer_bytes: the VMs' TCP buffers (None: the kernel's);
    split_processes: on CPU, one process per device, as GPUs shared; gpu_speeds: on CPU, each VM
    computes at its GPU's speed (harness.backends.emulation.compute)."""
    base = one_shape(slices)[0]
    vms = [(vm.name, vm.gpus) for vm in base.vms]
    processes = layout.gpu(vms, layout.visible_gpus()) if platform == "gpu" else layout.cpu(vms, split_processes)
    # A GPU platform's VMs run on real GPUs, at their own speeds.
    gpu_shares = compute.shares(slices) if platform == "cpu" and gpu_speeds else None
    with EmulatedNetwork(base, tcp_buffer_bytes=tcp_buffer_bytes) as net, RayCluster(net, gpu_shares) as nodes, \
            nodes.driver() as driver:
        cluster = EmulatedCluster(driver, base.gpus_per_vm, platform, processes, net, nodes.quotas)
        try:
            yield cluster
        finally:
            cluster.close()


class LiveCluster(RayDriven):
    """A running Ray cluster on the VMs of a live slice. Its links are what they are: measured,
    not set, and not counted. link_check: the pairs measured before the first trial, held against
    the slice file (None where the inventory names no hosts to measure from)."""
    tcp_buffer_bytes = None
    compute_shares: dict = {}

    def __init__(self, driver, devices_per_host, platform, heartbeat_s: int | None, link_check: dict | None):
        super().__init__(driver, devices_per_host, platform)
        self.heartbeat_s, self.link_check = heartbeat_s, link_check

    def use_slice(self, sl: Slice) -> None:
        pass

    def counters(self, vms: VMs) -> dict | None:
        return None

    def facts(self, vms: VMs) -> dict:
        network = {"mechanism": "live"}
        if self.link_check is not None:
            network["link_check"] = self.link_check
        return {"network": network}


class LinkOff(RuntimeError):
    """--strict-link: a measured pair is more than the tolerance off the slice file's."""


def driver_command(inv: Inventory) -> list[str] | None:
    """The Ray driver on VM1, as `live up` installed it there, spoken to over SSH; None (a driver
    on this machine) where the inventory names no hosts."""
    if inv.hosts is None:
        return None
    vm1 = hosts.load(inv.hosts).hosts[0]
    w = shlex.quote(vm1.workdir)
    script = f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(cat {w}/ray_token) exec {w}/venv/bin/python -m harness.backends.ray_driver"
    return [sys.executable, "-m", "harness.backends.live.ssh", "pipe", inv.hosts, vm1.name, "--", "sh", "-c", script]


def check_links(inv: Inventory) -> dict | None:
    """Every pair of the inventory's VMs measured now, over SSH, and held against the hosts'
    slice file; None where the inventory names no hosts."""
    if inv.hosts is None:
        return None
    measured = bringup.measure_links(hosts.load(inv.hosts))
    return {"tolerance": links.TOLERANCE, "measured": [m.to_dict() for m in measured], "off": links.flagged(measured)}


@contextlib.contextmanager
def live(inv: Inventory, strict_link: bool = False):
    """The inventory's cluster. Where `live up` wrote it (it names the hosts), the links are
    measured first and the driver runs on VM1 over SSH, so that this machine may be any; else
    this machine must be a node of the cluster (a Ray driver needs a local node)."""
    link_check = check_links(inv)
    if strict_link and link_check and link_check["off"]:
        raise LinkOff("; ".join(link_check["off"]))
    heartbeat = inv.timeouts["heartbeat_s"] if inv.timeouts else None
    with DriverClient([], inv.ray_address, [vm.name for vm in inv.slice.vms], command=driver_command(inv)) as driver:
        cluster = LiveCluster(driver, inv.slice.gpus_per_vm, inv.platform, heartbeat, link_check)
        try:
            yield cluster
        finally:
            cluster.close()
