"""What the harness knows of the network: inside a VM (ici, PCIe) and between VMs (dcn, TCP).

Network is the full model the cost model prices transfers with (one TCP connection per ring edge,
its window, slow start after idle, a fixed cost per collective); Links is the planners' summary of
it, one bandwidth and latency per axis (Network.links), which the Shard planner costs plans with.

Between VMs, GPUs talk over TCP (NCCL's socket transport). One TCP connection carries at most
window / RTT bytes per second however fast the link is, so a slice's RTT caps the bandwidth
between its VMs. Every constant below is the stock setting of one layer of the paper's stack, named
where it is set; `calibrated` replaces them with what a probe measured on a link.
Inside a VM the figures are those of PCIe-attached GPUs without NVLink, as on FABRIC's VMs.
"""
import math
from dataclasses import dataclass, replace

# Linux TCP in the VMs (Documentation/networking/ip-sysctl.rst; the distributions keep these).
TCP_RMEM_MAX = 6 * 2**20  # net.ipv4.tcp_rmem, third value (6291456): the most a receiver buffers
TCP_WMEM_MAX = 4 * 2**20  # net.ipv4.tcp_wmem, third value (4194304): the most a sender buffers
TCP_ADV_WIN_SCALE = 1  # net.ipv4.tcp_adv_win_scale before Linux 6.6: half the receive buffer is window
# A sender keeps about a quarter of its buffer queued unsent, as the emulated link measures it at the
# paper's RTTs (tests_cpu/test_bench_tcp.py reports in_flight_bytes in its benchmark JSON).
SEND_BUFFER_IN_FLIGHT = 0.75
TCP_WINDOW_BYTES = min(TCP_RMEM_MAX / 2**TCP_ADV_WIN_SCALE, SEND_BUFFER_IN_FLIGHT * TCP_WMEM_MAX)  # 3 MiB
# NCCL's socket transport: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD connections to each peer,
# both 1 by default (NCCL raises them only on the AWS and GCP NICs it recognises).
NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD = 1, 1
NCCL_FLOWS_PER_PEER = NCCL_SOCKET_NTHREADS * NCCL_NSOCKS_PERTHREAD
GLOO_FLOWS_PER_PEER = 1  # gloo (JAX's CPU collectives) keeps one TCP pair per peer
PCIE_BYTES_PER_S = 12e9  # PCIe 3.0 x16, achievable
PCIE_LATENCY_S = 10e-6
TCP_INITIAL_WINDOW_SEGMENTS = 10  # RFC 6928, Linux's default initial congestion window
ETHERNET_MSS = 1448  # 1500-byte MTU less IP and TCP headers (with timestamps)
# FABRIC's VMs reach other sites through a shared 25 Gbit/s NIC unless a dedicated ConnectX NIC is
# asked for; a slice file's bandwidth_gbps overrides it.
DEFAULT_LINK_GBPS = 25.0
NCCL_LAUNCH_S = 20e-6  # launch and synchronisation of one NCCL collective: tens of microseconds


@dataclass(frozen=True)
class Links:
    ici_bytes_per_s: float = PCIE_BYTES_PER_S
    ici_latency_s: float = PCIE_LATENCY_S
    dcn_bytes_per_s: float = PCIE_BYTES_PER_S
    dcn_latency_s: float = PCIE_LATENCY_S

    @classmethod
    def for_rtt(cls, rtt_ms: float, link_bytes_per_s: float = DEFAULT_LINK_GBPS * 1e9 / 8) -> "Links":
        """A slice whose VMs are rtt_ms apart on a link of the given speed (default 25 Gbit/s)."""
        return Network(link_bytes_per_s=link_bytes_per_s).links(rtt_ms)

    def uniform(self) -> "Links":
        """The network as a planner that ignores VMs sees it (every link like the fast one)."""
        return Links(self.ici_bytes_per_s, self.ici_latency_s, self.ici_bytes_per_s, self.ici_latency_s)

    def all_reduce_s(self, nbytes: float, hosts: int, devices: int) -> float:
        """Ring all-reduce over a group of hosts x devices; the slowest link in the ring sets the pace."""
        n = hosts * devices
        if n == 1:
            return 0.0
        bw, lat = (self.dcn_bytes_per_s, self.dcn_latency_s) if hosts > 1 else (self.ici_bytes_per_s, self.ici_latency_s)
        return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat


@dataclass(frozen=True)
class Network:
    """How bytes move: inside a VM over PCIe, between VMs over one TCP connection per ring edge."""
    link_bytes_per_s: float = DEFAULT_LINK_GBPS * 1e9 / 8
    window_bytes: float = TCP_WINDOW_BYTES
    initial_window_bytes: float = TCP_INITIAL_WINDOW_SEGMENTS * ETHERNET_MSS
    ici_bytes_per_s: float = PCIE_BYTES_PER_S
    ici_latency_s: float = PCIE_LATENCY_S
    ring_over_devices: bool = True  # NCCL: every GPU is a rank; gloo (JAX on CPU): one rank per VM
    per_collective_s: float = NCCL_LAUNCH_S  # fixed cost of one collective between VMs
    flows_per_peer: int = NCCL_FLOWS_PER_PEER  # TCP connections between two ranks, each with its window
    # Gradients cross in 30 MiB buckets (XLA's GPU combiners, NCCL); per_tensor: one collective per
    # tensor instead, as XLA's CPU runtime runs them (techniques/buckets.py).
    per_tensor: bool = False
    # A collective that its program leaves free beside the compute (DiLoCo's delayed sync) runs
    # alongside it, as XLA's asynchronous collectives do on GPUs; the CPU runtime runs it alone
    # (docs/techniques.md, DiLoCo).
    overlaps_compute: bool = True
    # The rate an emulated link is shaped to (the delay link's or netem's serialisation), where it is
    # shaped. A window's segments queue for it on top of their round trip, so a flow that its window
    # holds back carries window / (RTT + window / rate), not the smaller of window / RTT and the rate:
    # with the scale model's few jumbo segments per window the ACK clock cannot hide the queue
    # (docs/selection-and-costmodel.md, "A shaped link").
    shaped_bytes_per_s: float | None = None

    @property
    def peer_window_bytes(self) -> float:
        return self.flows_per_peer * self.window_bytes

    def calibrated(self, rtt_ms: float, flow_bytes_per_s: float) -> "Network":
        """This network with what one TCP flow was measured to carry at rtt_ms (a probe's steady
        rate): that rate x RTT is the window a flow keeps in flight. A flow that filled at least
        90% of the link was not held back by its window: then the link's rate is what was measured."""
        if rtt_ms <= 0 or flow_bytes_per_s <= 0:
            raise ValueError(f"a measured link needs a positive RTT and rate, got {rtt_ms} ms, {flow_bytes_per_s} B/s")
        if flow_bytes_per_s >= 0.9 * self.link_bytes_per_s:
            return replace(self, link_bytes_per_s=flow_bytes_per_s)
        window = flow_bytes_per_s * rtt_ms / 1e3
        return replace(self, window_bytes=window, initial_window_bytes=min(self.initial_window_bytes, window))

    def flow_bytes_per_s(self, rtt_s: float) -> float:
        """What one connection between two ranks carries per second once its window is open: the
        link's rate, or its window per round trip where that is less (a round trip that a shaped
        link lengthens by the window's own queueing)."""
        link = min(self.link_bytes_per_s, self.shaped_bytes_per_s or math.inf)
        queued = self.peer_window_bytes / self.shaped_bytes_per_s if self.shaped_bytes_per_s else 0.0
        return link if rtt_s <= 0 else min(link, self.peer_window_bytes / (rtt_s + queued))

    def send_s(self, nbytes: float, rtt_s: float) -> float:
        """One TCP connection moving nbytes from a cold start (after idle): one-way latency, then
        round trips whose window doubles from the initial one (slow start) up to what the flow
        carries per round trip (flow_bytes_per_s), after which it carries that. On a shaped link
        each round trip is also as long as its window takes to drain at the shaped rate, as when
        the window is open (flow_bytes_per_s): the bytes sent while it opens queue for it too."""
        if nbytes <= 0:
            return 0.0
        rate = self.flow_bytes_per_s(rtt_s)
        if rtt_s <= 0:
            return nbytes / rate
        drain = 1 / self.shaped_bytes_per_s if self.shaped_bytes_per_s else 0.0  # seconds a byte queues
        # The window a round trip carries once open: rate x (RTT + its own drain); rate < the
        # shaped rate wherever RTT > 0, so the denominator is positive.
        cap = rate * rtt_s / (1 - rate * drain)
        first = min(self.initial_window_bytes, cap)
        opening = max(0, math.ceil(math.log2(cap / first)))  # round trips before the window is fully open
        carried = first * (2**opening - 1)  # what those round trips carry
        if nbytes <= carried:
            return rtt_s / 2 + math.ceil(math.log2(nbytes / first + 1)) * rtt_s + nbytes * drain
        return rtt_s / 2 + opening * rtt_s + carried * drain + (nbytes - carried) / rate

    def ring_s(self, nbytes: float, hosts: int, devices: int, rtt_s: float, phases: int) -> float:
        """A ring collective over hosts x devices moving nbytes per rank: phases = 2 for an
        all-reduce (reduce-scatter then all-gather), 1 for either half alone."""
        if hosts * devices == 1:
            return 0.0
        local = 0.0  # the part inside each VM: all of it on one VM; for gloo, the reduction before the ring
        if devices > 1:
            d = devices
            local = phases * (d - 1) / d * nbytes / self.ici_bytes_per_s + phases * (d - 1) * self.ici_latency_s
        if hosts == 1:
            return local
        ranks = hosts * devices if self.ring_over_devices else hosts
        per_edge = phases * (ranks - 1) / ranks * nbytes  # what each TCP connection of the ring carries
        steps = phases * (ranks - 1)
        cross = self.send_s(per_edge, rtt_s) + (steps - 1) * rtt_s / 2
        return self.per_collective_s + cross + (0.0 if self.ring_over_devices else local)

    def buckets_s(self, buckets: list[float], hosts: int, devices: int, rtt_s: float, phases: int) -> float:
        """Ring collectives of these sizes back to back (combined gradient buckets): the bytes
        stream as one transfer, the connection staying warm between them, and each further
        bucket adds its own ring's chain of steps, one one-way latency each, and its fixed cost."""
        if not buckets:
            return 0.0
        total = self.ring_s(sum(buckets), hosts, devices, rtt_s, phases)
        if hosts == 1:
            return total + (len(buckets) - 1) * phases * (devices - 1) * self.ici_latency_s
        ranks = hosts * devices if self.ring_over_devices else hosts
        return total + (len(buckets) - 1) * (self.per_collective_s + phases * (ranks - 1) * rtt_s / 2)

    def links(self, rtt_ms: float) -> Links:
        """The planners' summary: one TCP connection carries at most window / RTT between VMs."""
        rtt = max(rtt_ms, 0.01) / 1e3
        return Links(self.ici_bytes_per_s, self.ici_latency_s,
                     min(self.link_bytes_per_s, self.peer_window_bytes / rtt), rtt / 2)
