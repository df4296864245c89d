"""EmulatedNetwork: a slice's VMs as network namespaces joined by a delay link, torn down whatever happens.

    with EmulatedNetwork(slice) as net:      # namespaces up, link up, RTT = the slice's
        net.popen("vm2", [...])              # a process inside VM2
        net.set_rtt(57.4)                    # a live change: same namespaces, same processes
    # everything gone, on success, failure, timeout or Ctrl-C

Every VM gets an address in 198.18.0.0/24 (RFC 2544's range for benchmarking, never routed).

Two mechanisms put the delay on the packets; every result records the one that carried it:
- netem (netem.py): a veth pair per two VMs, the kernel's netem qdisc on each end. `auto` picks it
  where the kernel has sch_netem.
- userspace (delaylink.py): a TUN device per VM and a relay process that holds each packet; it works
  on every kernel with TUN, and is what `auto` picks where netem is missing (this suite's CI
  machines; the netem tests there boot a stock kernel under qemu, tests_cpu/stock_kernel.py).
"""
import json
import os
import subprocess
import sys
import uuid

from harness.backends.emulation import netem, netns, probe
from harness.platform import slices
from harness.platform.slices import Slice

SUBNET = "198.18.0"
# Jumbo frames, as FABRIC's dataplane carries: large enough that the relay's cost per packet does
# not cap the link's rate, small enough that TCP opens as on a real path: at 65000 bytes the receiver's window grows from one
# segment, and at 1500 the relay moves a fraction of the link (tests_cpu/test_bench_tcp.py measures
# the transfers side by side).
MTU = 9000


MECHANISMS = ("auto", "userspace", "netem")


def choose_mechanism(requested: str = "auto") -> str:
    if requested not in MECHANISMS:
        raise ValueError(f"delay mechanism must be one of {', '.join(MECHANISMS)}, got {requested!r}")
    if requested == "userspace":
        if not netns.has_tun():
            raise netns.Unavailable("the userspace delay link cannot be used: /dev/net/tun is missing")
        return requested
    why = netns.netem_missing()
    if why is None:
        return "netem"
    if requested == "netem":
        raise netns.Unavailable(f"the netem delay mechanism cannot be used: {why}; use the userspace delay link")
    # Said, since the two differ in what they carry (the run's records keep what each link measured).
    print(f"the userspace delay link, as netem cannot be used here: {why}", file=sys.stderr)
    return "userspace"


class RelayLinks:
    """The userspace mechanism: a TUN device in each namespace, one relay process that holds the packets."""

    def __init__(self, netns: dict[str, str], address: dict[str, str], mtu: int):
        self.netns, self.address, self.mtu = netns, address, mtu
        self.relay: subprocess.Popen | None = None

    def start(self, links: list[dict]) -> None:
        endpoints = [[f"/var/run/netns/{name}", "tun0", self.address[vm]] for vm, name in self.netns.items()]
        self.relay = subprocess.Popen([sys.executable, "-m", "harness.backends.emulation.delaylink"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.relay.stdin.write(json.dumps({"endpoints": endpoints, "links": links}) + "\n")
        self.relay.stdin.flush()
        if self.relay.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the delay link did not start (exit status {self.relay.poll()})")
        for vm, name in self.netns.items():
            netns.ip("addr", "add", f"{self.address[vm]}/24", "dev", "tun0", netns=name)
            netns.ip("link", "set", "tun0", "mtu", str(self.mtu), "up", netns=name)

    def apply(self, links: list[dict]) -> None:
        if self._ask({"links": links}) != "ok":
            raise RuntimeError("the delay link did not accept the new delay")

    def counters(self) -> dict[str, dict[str, int]]:
        return self._ask({"counters": True})

    def held_ms(self) -> dict[str, list[float]]:
        return self._ask({"held": True})

    def _ask(self, message: dict):
        self.relay.stdin.write(json.dumps(message) + "\n")
        self.relay.stdin.flush()
        answer = self.relay.stdout.readline().strip()
        return answer if answer == "ok" else json.loads(answer)

    def close(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            try:
                self.relay.stdin.write(json.dumps({"stop": True}) + "\n")
                self.relay.stdin.flush()
                self.relay.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.relay.pid, 9)
                self.relay.wait()
        self.relay = None


class EmulatedNetwork:
    def __init__(self, sl: Slice, rtt_ms: float | None = None, mechanism: str = "auto",
                 tcp_buffer_bytes: int | None = None):
        """rtt_ms: one RTT for every pair instead of the slice's own (a latency sweep);
        tcp_buffer_bytes: each VM's TCP buffers (netns.create), for the whole life of the network."""
        self.tcp_buffer_bytes = tcp_buffer_bytes
        self.mechanism = choose_mechanism(mechanism)
        self.slice = sl
        self.rtt_ms = rtt_ms
        run = uuid.uuid4().hex[:6]
        self.netns = {vm.name: f"{netns.PREFIX}{run}-{vm.name}" for vm in sl.vms}
        self.address = {vm.name: f"{SUBNET}.{i + 1}" for i, vm in enumerate(sl.vms)}
        links = RelayLinks if self.mechanism == "userspace" else netem.NetemLinks
        self.links = links(self.netns, self.address, MTU)
        self.down: set[frozenset] = set()
        self.congestion_control: dict[str, str] = {}  # each VM's TCP, as its namespace runs it

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
            self.congestion_control[vm] = netns.create(name, self.address[vm], self.tcp_buffer_bytes)
        self.links.start(self._links())

    def target_rtt_ms(self, a: str, b: str) -> float:
        return self.slice.rtt_between(a, b) if self.rtt_ms is None else self.rtt_ms

    def shape(self, a: str, b: str) -> slices.Shape:
        """What the direction from VM a to VM b does to packets now."""
        return self.slice.shape(a, b, self.rtt_ms)

    def settings(self) -> dict[str, dict]:
        """{"a>b": the direction's settings, queue resolved, and the sending VM's congestion control}:
        what a record shows of the link."""
        largest = max((self.target_rtt_ms(a, b) for a in self.address for b in self.address if a != b), default=0.0)
        return {f"{a}>{b}": self.shape(a, b).to_dict(largest) | {"up": frozenset((a, b)) not in self.down,
                                                                 "tcp_congestion_control": self.congestion_control.get(a),
                                                                 "tcp_buffer_bytes": self.tcp_buffer_bytes}
                for a in self.address for b in self.address if a != b}

    def _links(self) -> list[dict]:
        out = []
        for key, s in self.settings().items():
            a, b = key.split(">")
            out.append({"src": self.address[a], "dst": self.address[b],
                        "delay_s": s["delay_ms"] / 1e3 if s["up"] else None, "jitter_s": s["jitter_ms"] / 1e3,
                        "distribution": s["jitter_distribution"], "loss": s["loss_percent"] / 100,
                        "gemodel": [v / 100 for v in s["loss_gemodel"].values()] if s["loss_gemodel"] else None,
                        "rate": s["bandwidth_gbps"] * 1e9 / 8 if s["bandwidth_gbps"] else None,
                        "limit": s["queue_packets"], "offload": self.shape(a, b).delay_only})
        return out

    def counters(self) -> dict[str, dict[str, int]]:
        """{"a>b": packets, delivered and dropped (by cause) since the link came up}."""
        by_address = self.links.counters()
        return {f"{a}>{b}": by_address.get(f"{self.address[a]}>{self.address[b]}", {})
                for a in self.address for b in self.address if a != b}

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
        """Give the live link another slice's shapes: delays, rates, loss (same VM names): one cluster
        serves a sweep over slices that differ only in their network."""
        if [vm.name for vm in sl.vms] != [vm.name for vm in self.slice.vms]:
            raise ValueError(f"slice {sl.name} has other VMs than {self.slice.name}")
        self.slice, self.rtt_ms = sl, None
        self._send_links()

    def _send_links(self) -> None:
        self.links.apply(self._links())
        # Linux remembers each peer's RTT, ssthresh and cwnd from closed connections (tcp_metrics)
        # and starts the next ones from them: after a change of delay those are another link's.
        for name in self.netns.values():
            netns.ip("tcp_metrics", "flush", "all", netns=name)

    def held_ms(self) -> dict[tuple[str, str], list[float]]:
        """{(a, b): how long the link held each packet from VM a to VM b since the last call, in ms},
        as the relay measured it between reading and writing the packet: what the link adds,
        without the scheduling of the processes at either end."""
        if self.mechanism != "userspace":
            raise NotImplementedError(f"the {self.mechanism} mechanism does not report how long it held packets")
        held = self.links.held_ms()
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

    def popen(self, vm: str, argv: list[str], outside: list[str] = (), **kwargs) -> subprocess.Popen:
        """A process inside VM `vm` (its namespace, its /etc/hosts); outside: a command prefix
        that runs before it enters (`ip netns exec` mounts a /sys of the namespace, without the
        cgroups of harness.backends.emulation.compute)."""
        return subprocess.Popen([*outside, "ip", "netns", "exec", self.netns[vm], *argv], **kwargs)

    def run(self, vm: str, argv: list[str], timeout: float = 120, outside: list[str] = (),
            **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([*outside, "ip", "netns", "exec", self.netns[vm], *argv], timeout=timeout, **kwargs)

    def close(self) -> None:
        self.links.close()
        for name in self.netns.values():
            netns.delete(name)


def _server(net: EmulatedNetwork, vm: str, mode: str, port: int) -> subprocess.Popen:
    proc = net.popen(vm, [sys.executable, "-m", "harness.backends.emulation.probe", mode, net.address[vm], str(port)],
                     stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"probe {mode} server did not start in {vm}")
    return proc


def measure_rtt(net: EmulatedNetwork, a: str, b: str, count: int = probe.PROBES, port: int = 7101) -> float:
    """RTT in ms between VMs a and b as ping reports it (the fastest of `count` UDP probes from a
    to an echo in b)."""
    server = _server(net, b, "echo", port)
    try:
        out = net.run(a, [sys.executable, "-m", "harness.backends.emulation.probe", "ping", net.address[b], str(port),
                          str(count)], capture_output=True, text=True, check=True)
        return probe.min_rtt_ms(json.loads(out.stdout)["rtt_ms"])
    finally:
        server.kill()
        server.wait()


def transfer(net: EmulatedNetwork, a: str, b: str, nbytes: int, port: int = 7102) -> dict:
    """One bulk TCP transfer from VM a to VM b: {"bytes", "seconds" (connect to the receiver's
    answer), "steady_bytes_per_s" (the second half's rate, past slow start), "in_flight_bytes"
    (what the sender kept unacknowledged meanwhile, on average)}."""
    server = _server(net, b, "sink", port)
    try:
        out = net.run(a, [sys.executable, "-m", "harness.backends.emulation.probe", "send", net.address[b], str(port),
                          str(nbytes)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    finally:
        server.kill()
        server.wait()


def measure_throughput(net: EmulatedNetwork, a: str, b: str, nbytes: int, port: int = 7102) -> float:
    """Bytes per second of one bulk TCP transfer from VM a to VM b (connection set-up included)."""
    result = transfer(net, a, b, nbytes, port)
    return result["bytes"] / result["seconds"]


def tcp_window_bytes(net: EmulatedNetwork, vm: str) -> int:
    out = net.run(vm, [sys.executable, "-m", "harness.backends.emulation.probe", "window", "-", "0"],
                  capture_output=True, text=True, check=True)
    return int(out.stdout)
