"""EmulatedNetwork: a slice's VMs as network namespaces joined by a delay link, torn down whatever happens.

    with EmulatedNetwork(slice) as net:      # namespaces up, link up, RTT = the slice's
        net.popen("vm2", [...])              # a process inside VM2
        net.set_rtt(57.4)                    # a live change: same namespaces, same processes
    # everything gone, on success, failure, timeout or Ctrl-C

Every VM gets an address in 198.18.0.0/24 (RFC 2544's range for benchmarking, never routed).

Mechanism: the userspace delay link (delaylink.py), which works on every kernel with TUN. tc
netem is the other mechanism docs/design.md names; this version does not implement it (the kernels
it was built and tested on lack sch_netem, so a netem path could not be tested), and asking for
it says so. Every result records the mechanism that carried it.
"""
import json
import os
import subprocess
import sys
import uuid

from harness.emulation import netns, probe
from harness.slices import Slice

SUBNET = "198.18.0"
MTU = 65000  # large packets keep the relay's per-packet cost low


MECHANISMS = ("auto", "userspace", "netem")


def choose_mechanism(requested: str = "auto") -> str:
    if requested not in MECHANISMS:
        raise ValueError(f"delay mechanism must be one of {', '.join(MECHANISMS)}, got {requested!r}")
    if requested == "netem":
        why = "this kernel lacks sch_netem" if not netns.has_netem() else "it is not implemented in this version"
        raise netns.Unavailable(f"the netem delay mechanism cannot be used: {why}; use the userspace delay link")
    return "userspace"


class EmulatedNetwork:
    def __init__(self, sl: Slice, rtt_ms: float | None = None, cpu_only: bool = True, mechanism: str = "auto"):
        """rtt_ms: one RTT for every pair instead of the slice's own (a latency sweep)."""
        self.mechanism = choose_mechanism(mechanism)
        self.slice = sl
        self.cpu_only = cpu_only  # the scale model: VMs' GPUs are CPU devices
        self.rtt_ms = rtt_ms
        self.rate = sl.bandwidth_gbps * 1e9 / 8 if sl.bandwidth_gbps else None
        run = uuid.uuid4().hex[:6]
        self.netns = {vm.name: f"{netns.PREFIX}{run}-{vm.name}" for vm in sl.vms}
        self.address = {vm.name: f"{SUBNET}.{i + 1}" for i, vm in enumerate(sl.vms)}
        self.relay: subprocess.Popen | None = None
        self.down: set[frozenset] = set()

    def __enter__(self) -> "EmulatedNetwork":
        problem = netns.missing_privileges()
        if problem:
            raise netns.Unavailable(problem)
        netns.sweep()
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _up(self) -> None:
        for vm, name in self.netns.items():
            netns.create(name, self.address[vm])
        endpoints = [[f"/var/run/netns/{name}", "tun0", self.address[vm]] for vm, name in self.netns.items()]
        self.relay = subprocess.Popen([sys.executable, "-m", "harness.emulation.delaylink"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.relay.stdin.write(json.dumps({"endpoints": endpoints, "links": self._links()}) + "\n")
        self.relay.stdin.flush()
        if self.relay.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the delay link did not start (exit status {self.relay.poll()})")
        for vm, name in self.netns.items():
            netns.ip("addr", "add", f"{self.address[vm]}/24", "dev", "tun0", netns=name)
            netns.ip("link", "set", "tun0", "mtu", str(MTU), "up", netns=name)

    def target_rtt_ms(self, a: str, b: str) -> float:
        return self.slice.rtt_between(a, b) if self.rtt_ms is None else self.rtt_ms

    def _links(self) -> list:
        return [[self.address[a], self.address[b],
                 None if frozenset((a, b)) in self.down else self.target_rtt_ms(a, b) / 2 / 1e3, self.rate]
                for a in self.address for b in self.address if a != b]

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between VMs a and b down (every packet dropped, both ways) or back up."""
        (self.down.discard if up else self.down.add)(frozenset((a, b)))
        self._send_links()

    def set_rtt(self, rtt_ms: float | None) -> None:
        """Change the delay of the live link (None: back to the slice's own RTTs); connections and
        processes stay up, so a latency sweep reuses one cluster and one compiled step."""
        self.rtt_ms = rtt_ms
        self._send_links()

    def use_slice(self, sl: Slice) -> None:
        """Give the live link another slice's RTTs and bandwidth cap (same VM names): one cluster
        serves a sweep over slices that differ only in their network."""
        if [vm.name for vm in sl.vms] != [vm.name for vm in self.slice.vms]:
            raise ValueError(f"slice {sl.name} has other VMs than {self.slice.name}")
        self.slice, self.rtt_ms = sl, None
        self.rate = sl.bandwidth_gbps * 1e9 / 8 if sl.bandwidth_gbps else None
        self._send_links()

    def _send_links(self) -> None:
        self.relay.stdin.write(json.dumps({"links": self._links()}) + "\n")
        self.relay.stdin.flush()
        if self.relay.stdout.readline().strip() != "ok":
            raise RuntimeError("the delay link did not accept the new delay")

    def held_ms(self) -> dict[tuple[str, str], list[float]]:
        """{(a, b): how long the link held each packet from VM a to VM b since the last call, in ms},
        as the relay measured it between reading and writing the packet: what the link adds,
        without the scheduling of the processes at either end."""
        self.relay.stdin.write(json.dumps({"held": True}) + "\n")
        self.relay.stdin.flush()
        held = json.loads(self.relay.stdout.readline())
        return {(a, b): held.get(f"{self.address[a]}>{self.address[b]}", [])
                for a in self.address for b in self.address if a != b}

    def link_rate(self, nbytes: int = 256 * 2**20) -> float:
        """Bytes per second of one TCP flow between the first two VMs at no added delay: what the
        link itself carries (the cost model's figure for it). The link's delays are restored."""
        a, b, *_ = self.netns
        saved = self.rtt_ms
        self.set_rtt(0.0)
        try:
            return measure_throughput(self, a, b, nbytes)
        finally:
            self.set_rtt(saved)

    def popen(self, vm: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """A process inside VM `vm` (its namespace, its /etc/hosts)."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns[vm], *argv], **kwargs)

    def run(self, vm: str, argv: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns[vm], *argv], timeout=timeout, **kwargs)

    def close(self) -> None:
        if self.relay is not None:
            if self.relay.poll() is None:
                try:
                    self.relay.stdin.write(json.dumps({"stop": True}) + "\n")
                    self.relay.stdin.flush()
                    self.relay.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    os.killpg(self.relay.pid, 9)
                    self.relay.wait()
            self.relay = None
        for name in self.netns.values():
            netns.delete(name)


def _server(net: EmulatedNetwork, vm: str, mode: str, port: int) -> subprocess.Popen:
    proc = net.popen(vm, [sys.executable, "-m", "harness.emulation.probe", mode, net.address[vm], str(port)],
                     stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"probe {mode} server did not start in {vm}")
    return proc


def measure_rtt(net: EmulatedNetwork, a: str, b: str, count: int = probe.PROBES, port: int = 7101) -> float:
    """RTT in ms between VMs a and b as ping reports it (the fastest of `count` UDP probes from a
    to an echo in b)."""
    server = _server(net, b, "echo", port)
    try:
        out = net.run(a, [sys.executable, "-m", "harness.emulation.probe", "ping", net.address[b], str(port),
                          str(count)], capture_output=True, text=True, check=True)
        return probe.min_rtt_ms(json.loads(out.stdout)["rtt_ms"])
    finally:
        server.kill()
        server.wait()


def measure_throughput(net: EmulatedNetwork, a: str, b: str, nbytes: int, port: int = 7102) -> float:
    """Bytes per second of one bulk TCP transfer from VM a to VM b (connection set-up included)."""
    server = _server(net, b, "sink", port)
    try:
        out = net.run(a, [sys.executable, "-m", "harness.emulation.probe", "send", net.address[b], str(port),
                          str(nbytes)], capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        return result["bytes"] / result["seconds"]
    finally:
        server.kill()
        server.wait()


def tcp_window_bytes(net: EmulatedNetwork, vm: str) -> int:
    out = net.run(vm, [sys.executable, "-m", "harness.emulation.probe", "window", "-", "0"],
                  capture_output=True, text=True, check=True)
    return int(out.stdout)
