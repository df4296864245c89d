"""The netem mechanism: every pair of VMs joined by its own veth pair, each direction shaped by the
kernel's netem qdisc on the sending end.

    VM i  --- v<j> ===veth=== v<i> ---  VM j        (interface v<k> leads to the VM numbered k)
          netem: i -> j's shape     netem: j -> i's shape

A pair of its own for every two VMs gives each direction its own delay, jitter, loss and rate with
nothing but a root netem qdisc: no classifier has to pick a destination's class, and any number of
VMs works (a slice of n VMs has n(n-1)/2 pairs). A VM's address sits on its loopback and a /32
route sends each peer's address down that peer's veth.

Packets cross at the network's MTU (network.MTU, FABRIC's jumbo frames) with segmentation
offloads off on the veths, so that netem's queue limit, loss and counters apply to packets, not to
64 kB TSO bursts.

pyroute2 makes the veths, addresses and routes and reads the qdiscs' counters. The qdisc itself is
set with tc: pyroute2 0.9's netem encoder has no delay distributions and no Gilbert-Elliott loss
(its source marks them TODO), while tc builds both.
"""
import subprocess
import uuid

from pyroute2 import IPRoute, NetNS
from pyroute2.ethtool import Ethtool

OFFLOADS = ("tx-tcp-segmentation", "tx-tcp6-segmentation", "generic-segmentation-offload",
            "generic-receive-offload")


def netem_args(link: dict) -> list[str]:
    """tc's words for one direction (the delay link's settings dict: delays in s, fractions)."""
    if link["delay_s"] is None:  # the direction is down
        return ["loss", "100%", "limit", str(link["limit"])]
    words = ["delay", f"{link['delay_s'] * 1e6:.0f}us"]
    if link["jitter_s"]:
        words += [f"{link['jitter_s'] * 1e6:.0f}us"]
        if link["distribution"] != "uniform":  # netem's jitter is uniform unless given a table
            words += ["distribution", link["distribution"]]
    if link["gemodel"]:
        words += ["loss", "gemodel", *(f"{p * 100:g}%" for p in link["gemodel"])]
    elif link["loss"]:
        words += ["loss", f"{link['loss'] * 100:g}%"]
    if link["rate"]:
        words += ["rate", f"{link['rate'] * 8:.0f}bit"]
    return words + ["limit", str(link["limit"])]


class NetemLinks:
    def __init__(self, netns: dict[str, str], address: dict[str, str], mtu: int):
        """netns, address: {VM name: its namespace, its address}, in the slice's order."""
        self.netns, self.address, self.mtu = netns, address, mtu
        self.index = {vm: i for i, vm in enumerate(netns)}
        self.vm_at = {a: vm for vm, a in address.items()}
        self.shaped: dict[tuple[str, str], dict] = {}
        self.drops: dict[tuple[str, str], dict[str, int]] = {}  # by cause, as attributed so far
        self.tag = uuid.uuid4().hex[:4]  # in the names veths have in the machine's namespace
        self.made: list[str] = []  # those names: a veth not yet moved when start() fails is removed

    def iface(self, a: str, b: str) -> str:
        """The interface in VM a's namespace that leads to VM b."""
        return f"v{self.index[b]}"

    def start(self, links: list[dict]) -> None:
        vms = list(self.netns)
        for vm in vms:
            with NetNS(self.netns[vm]) as ns:
                ns.addr("add", index=ns.link_lookup(ifname="lo")[0], address=self.address[vm], prefixlen=32)
        with IPRoute() as host, Ethtool() as ethtool:
            for i, a in enumerate(vms):
                for b in vms[i + 1:]:
                    # Made in the machine's namespace under names unlikely to be taken there, with
                    # offloads off (ethtool works by name in its own namespace), then moved and renamed.
                    ends = {a: f"fh{self.index[a]}x{self.index[b]}{self.tag}",
                            b: f"fh{self.index[b]}x{self.index[a]}{self.tag}"}
                    self.made.append(ends[a])
                    host.link("add", ifname=ends[a], kind="veth", peer=ends[b])
                    for vm, end in ends.items():
                        features = ethtool.get_features(end)
                        for name in OFFLOADS:
                            if name in features.features:
                                features.features[name].enable = False
                        ethtool.set_features(end, features)
                        other = b if vm == a else a
                        host.link("set", index=host.link_lookup(ifname=end)[0], net_ns_fd=self.netns[vm],
                                  ifname=self.iface(vm, other))
        for a in vms:
            with NetNS(self.netns[a]) as ns:
                for b in vms:
                    if b != a:
                        index = ns.link_lookup(ifname=self.iface(a, b))[0]
                        ns.link("set", index=index, mtu=self.mtu, state="up")
                        ns.route("add", dst=f"{self.address[b]}/32", oif=index, prefsrc=self.address[a])
        self.apply(links)

    def apply(self, links: list[dict]) -> None:
        """Put each direction's shape on its qdisc; a change keeps connections and counters."""
        for link in links:
            a, b = self.vm_at[link["src"]], self.vm_at[link["dst"]]
            if (a, b) in self.shaped:
                self._attribute_drops(a, b)  # drops so far belong to the shape they happened under
            command = ["tc", "-n", self.netns[a], "qdisc", "replace", "dev", self.iface(a, b), "root", "netem",
                       *netem_args(link)]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode:
                raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
            self.shaped[a, b] = link

    def _stats(self, a: str, b: str) -> tuple[int, int, int]:
        """(packets sent, packets dropped, bytes sent) by the qdisc of the direction a -> b, since it was made."""
        with NetNS(self.netns[a]) as ns:
            qdisc = ns.get_qdiscs(index=ns.link_lookup(ifname=self.iface(a, b))[0])[0]
        stats = qdisc.get_attr("TCA_STATS2")
        basic = stats.get_attr("TCA_STATS_BASIC")
        return basic["packets"], stats.get_attr("TCA_STATS_QUEUE")["drops"], basic["bytes"]

    def _attribute_drops(self, a: str, b: str) -> dict[str, int]:
        """netem counts loss and a full queue as one figure: the drops since the last call are filed
        under the one cause the direction's shape allows, or dropped_loss_or_queue where both can happen."""
        link = self.shaped[a, b]
        if link["delay_s"] is None:
            cause = "dropped_down"
        elif link["loss"] or link["gemodel"]:
            cause = "dropped_loss_or_queue"
        else:
            cause = "dropped_queue"
        counted = self.drops.setdefault((a, b), {})
        dropped = self._stats(a, b)[1]
        counted[cause] = counted.get(cause, 0) + dropped - sum(counted.values())
        return counted

    def counters(self) -> dict[str, dict[str, int]]:
        """{"src>dst" addresses: packets, delivered, and drops by cause}."""
        out = {}
        for (a, b), link in self.shaped.items():
            drops = dict(self._attribute_drops(a, b))
            sent, _, sent_bytes = self._stats(a, b)
            out[f"{link['src']}>{link['dst']}"] = {"packets": sent + sum(drops.values()), "delivered": sent,
                                                   "delivered_bytes": sent_bytes, "dropped_queue": 0} | drops
        return out

    def close(self) -> None:
        """A veth goes when either of its namespaces is deleted, its qdiscs with it; only one that
        start() made but did not move is left for here."""
        with IPRoute() as host:
            for name in self.made:
                for index in host.link_lookup(ifname=name):
                    host.link("del", index=index)
