"""What planners know of the network: bandwidth and latency inside a VM (ici) and between VMs (dcn).

Between VMs, GPUs talk over TCP (NCCL sockets). One TCP connection carries at most window / RTT
bytes per second however fast the link is, so a slice's RTT caps the bandwidth between its VMs;
Linux's default maximum receive window (tcp_rmem) is 6 MiB. Inside a VM the figures are those of
PCIe-attached GPUs without NVLink, as on the paper's FABRIC VMs.
"""
from dataclasses import dataclass

TCP_WINDOW_BYTES = 6 * 2**20  # Linux net.ipv4.tcp_rmem maximum, default
PCIE_BYTES_PER_S = 12e9  # PCIe 3.0 x16, achievable
PCIE_LATENCY_S = 10e-6


@dataclass(frozen=True)
class Links:
    ici_bytes_per_s: float = PCIE_BYTES_PER_S
    ici_latency_s: float = PCIE_LATENCY_S
    dcn_bytes_per_s: float = PCIE_BYTES_PER_S
    dcn_latency_s: float = PCIE_LATENCY_S

    @classmethod
    def for_rtt(cls, rtt_ms: float, link_bytes_per_s: float = 25e9 / 8) -> "Links":
        """A slice whose VMs are rtt_ms apart on a link of the given speed (default 25 Gbit/s)."""
        rtt = max(rtt_ms, 0.01) / 1e3
        return cls(dcn_bytes_per_s=min(link_bytes_per_s, TCP_WINDOW_BYTES / rtt), dcn_latency_s=rtt / 2)

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
