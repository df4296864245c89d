"""The userspace delay link: what tc netem does, for kernels without sch_netem (mahimahi's mm-delay idea).

Each emulated VM's namespace gets a TUN device; this relay process holds all of them. A packet
read from VM a's TUN and addressed to VM b waits in a timed queue for the one-way delay of the
direction (a, b), then is written to b's TUN. The delay is on the packets, so TCP sees a real RTT:
slow start, window / RTT throughput, retransmissions. Per direction, as netem: jitter drawn from a
distribution (packets overtake each other unless the direction has a rate, as with netem's), random
or Gilbert-Elliott loss, a rate (serialisation time, a bandwidth cap), and a queue limit in
packets: a packet that finds `limit` packets of its direction held is dropped. Every drop is
counted by cause.

Run as `python -m harness.backends.emulation.delaylink` with one JSON object on the first line of stdin:
    {"endpoints": [["/var/run/netns/<ns>", "tun0", "198.18.0.1"], ...],
     "links": [{"src": "198.18.0.1", "dst": "198.18.0.2", "delay_s": 0.01, "jitter_s": 0,
                "distribution": "normal", "loss": 0, "gemodel": [p, r, bad_loss, good_loss] or null,
                "rate": bytes_per_s or null, "limit": packets, "offload": bool}, ...]}
(a delay_s of null takes that direction down: its packets are dropped; probabilities are fractions;
offload: the direction only delays, so the sender may hand it TSO segments, see Relay.set_links).
It prints `ready` once every TUN exists. Later lines change links live ({"links": [...]}, answered
`ok`), ask how long the link held the packets it released since the last such question
({"held": true}, answered {"src>dst": [ms, ...]}: the latest HELD_KEPT per direction), ask for the
counters ({"counters": true}, answered {"src>dst": {"packets": n, "delivered": n, "dropped_queue": n,
"dropped_loss": n, "dropped_down": n, "dropped_receiver": n}}, totals since start), or stop it
({"stop": true}); end of stdin stops it too. Stopping closes the TUNs, which removes them.
"""
import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import socket
import struct
import sys
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

TUNSETIFF, TUNSETOFFLOAD = 0x400454CA, 0x400454D0
IFF_TUN, IFF_NO_PI, IFF_VNET_HDR = 0x0001, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
VNET_HDR = 10  # every packet on a TUN with IFF_VNET_HDR starts with a struct virtio_net_hdr
IP = VNET_HDR  # where the IPv4 header starts in what the relay reads
ADDRESSES = slice(IP + 12, IP + 20)  # source and destination address
CLONE_NEWNET = 0x40000000
SPIN_S = 0.0015  # epoll sleeps in whole milliseconds: the last stretch before a due packet is spun
# After traffic the relay keeps polling this long before it sleeps: a reply usually comes back
# within it, and waking a sleeping process costs a good part of a 0.1 ms RTT on a small VM.
BUSY_POLL_S = 0.002
HELD_KEPT = 1000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def open_tun(netns_path: str, name: str) -> int:
    """A TUN device `name` created inside the namespace at netns_path; its fd works from here."""
    home, target = os.open("/proc/self/ns/net", os.O_RDONLY), os.open(netns_path, os.O_RDONLY)
    try:
        _setns(target)
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR))
        return fd
    finally:
        _setns(home)
        os.close(home)
        os.close(target)


def set_offload(fd: int, on: bool) -> None:
    """Let the VM's stack hand this TUN checksum-less TCP segments of up to 64 kB (TSO, as a
    virtio NIC's), or make it send every packet at the MTU, checksummed."""
    fcntl.ioctl(fd, TUNSETOFFLOAD, (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) if on else 0)


def _pareto() -> float:
    """A draw of netem's pareto shape (alpha 3), scaled to mean 0 and standard deviation 1."""
    alpha = 3.0
    x = (1.0 - random.random()) ** (-1.0 / alpha)  # Pareto(alpha) with scale 1: mean 1.5, sd sqrt(3)/2
    return (x - 1.5) / (3 ** 0.5 / 2)


JITTER = {"uniform": lambda: random.uniform(-1.0, 1.0),  # netem's default: +-jitter
          "normal": lambda: random.gauss(0.0, 1.0),
          "pareto": _pareto}


@dataclass
class Direction:
    """One direction of a link, as netem's qdisc on the sender's side would hold it."""
    out: int  # the receiving VM's TUN
    delay: float
    jitter: float = 0.0
    distribution: str = "normal"
    loss: float = 0.0
    gemodel: tuple | None = None  # (p, r, bad_loss, good_loss) as fractions
    rate: float | None = None
    limit: int = 1000
    offload: bool = False  # whether the sender may hand over TSO segments (see set_links)
    bad: bool = False  # the Gilbert-Elliott state
    free_at: float = 0.0  # when the rate lets the next packet leave
    last_due: float = 0.0  # with a rate, packets leave in order
    held: int = 0  # packets in the queue now
    counts: Counter = field(default_factory=Counter)
    plain: bool = field(init=False)  # nothing to wait for or draw: the relay writes it on at once

    def __post_init__(self) -> None:
        self.plain = self.delay == 0.0 and not self.jitter and self.rate is None and not self.loss and not self.gemodel

    def lost(self) -> bool:
        if self.loss and random.random() < self.loss:
            return True
        if self.gemodel:
            p, r, bad_loss, good_loss = self.gemodel
            if random.random() < (r if self.bad else p):
                self.bad = not self.bad
            return random.random() < (bad_loss if self.bad else good_loss)
        return False

    def due(self, now: float, size: int) -> float:
        """When a packet of `size` bytes that arrives now leaves the link."""
        delay = self.delay + (self.jitter * JITTER[self.distribution]() if self.jitter else 0.0)
        if not self.rate:
            return now + max(0.0, delay)  # jitter alone reorders, as netem's does
        self.free_at = max(now, self.free_at) + size / self.rate
        self.last_due = max(self.free_at + max(0.0, delay), self.last_due)
        return self.last_due


class Relay:
    def __init__(self, endpoints: dict[bytes, int]):
        self.fd_of = endpoints  # IPv4 address (4 bytes) -> TUN fd
        # source + destination address (the 8 bytes at offset 12 of an IPv4 header) -> its direction
        self.route: dict[bytes, Direction] = {}
        self.down: dict[bytes, Counter] = {}  # directions taken down, with their counters
        self.queue: list = []  # (due, seq, direction, packet, arrived)
        self.seq = 0
        # What the link adds, measured where it is added: from a packet's read to its release.
        self.held: dict[bytes, deque] = defaultdict(lambda: deque(maxlen=HELD_KEPT))

    def set_links(self, links) -> None:
        """Direction settings as in the module's docstring; a delay_s of None takes one down."""
        for spec in links:
            pair = socket.inet_aton(spec["src"]) + socket.inet_aton(spec["dst"])
            if pair[4:] not in self.fd_of:
                continue
            old = self.route.pop(pair, None)
            counts = old.counts if old else self.down.pop(pair, Counter())
            if spec.get("delay_s") is None:
                self.down[pair] = counts
                continue
            gemodel = spec.get("gemodel")
            self.route[pair] = Direction(
                self.fd_of[pair[4:]], float(spec["delay_s"]), float(spec.get("jitter_s") or 0.0),
                spec.get("distribution") or "normal", float(spec.get("loss") or 0.0),
                tuple(gemodel) if gemodel else None, spec.get("rate"), int(spec.get("limit") or 1000),
                bool(spec.get("offload")), held=old.held if old else 0, counts=counts)

    def offloads(self) -> dict[int, bool]:
        """{TUN fd: whether its VM may hand it TSO segments}. A VM's stack hands its TUN TCP
        segments of up to 64 kB (as to a virtio NIC) while every direction out of it only delays
        them: the relay then moves several times fewer packets per byte, and TCP still counts its
        window in MTU-sized segments. Where a direction drops, reorders, paces or queues (loss,
        jitter, a rate, a queue limit of its own), that acts on MTU-sized packets, as netem's does
        on a veth with offloads off."""
        return {fd: all(d.offload for pair, d in self.route.items() if pair[:4] == address)
                for address, fd in self.fd_of.items()}

    def receive(self, fd: int) -> None:
        route, queue = self.route, self.queue
        while True:
            try:
                packet = os.read(fd, VNET_HDR + 65536)
            except BlockingIOError:
                return
            if packet[IP] >> 4 != 4:
                continue  # not IPv4 (e.g. IPv6 router solicitations): not the VMs' traffic
            key = packet[ADDRESSES]
            link = route.get(key)
            if link is None:
                if key in self.down:
                    self.down[key]["packets"] += 1
                    self.down[key]["dropped_down"] += 1
                continue
            link.counts["packets"] += 1
            if link.held >= link.limit:
                link.counts["dropped_queue"] += 1  # netem's limit: a full queue drops the newcomer
                continue
            if link.lost():
                link.counts["dropped_loss"] += 1
                continue
            if link.plain and not queue:
                self.held[key].append(0.0)
                self._write(link, packet)  # the fast path: nothing to wait for
                continue
            now = time.monotonic()
            link.held += 1
            heapq.heappush(queue, (link.due(now, len(packet) - VNET_HDR), self.seq, link, packet, now))
            self.seq += 1

    def deliver_due(self) -> float | None:
        """Write every packet whose time has come; seconds until the next one, or None."""
        while self.queue:
            now = time.monotonic()
            due = self.queue[0][0]
            if due > now:
                return due - now
            _, _, link, packet, arrived = heapq.heappop(self.queue)
            link.held -= 1
            self.held[packet[ADDRESSES]].append(now - arrived)  # the write's own cost is the machine's, as at no delay
            self._write(link, packet)
        return None

    def take_held_ms(self) -> dict[str, list[float]]:
        held = {_name(pair): [t * 1e3 for t in times] for pair, times in self.held.items()}
        self.held.clear()
        return held

    def counters(self) -> dict[str, dict[str, int]]:
        every = {pair: d.counts for pair, d in self.route.items()} | self.down
        return {_name(pair): {k: counts[k] for k in COUNTERS} for pair, counts in every.items()}

    @staticmethod
    def _write(link: Direction, packet: bytes) -> None:
        try:
            os.write(link.out, packet)
            link.counts["delivered"] += 1
            link.counts["delivered_bytes"] += len(packet) - VNET_HDR  # the IP packet: what a technique put on the wire
        except BlockingIOError:
            link.counts["dropped_receiver"] += 1  # the receiving VM's queue is full, as on a congested host


COUNTERS = ("packets", "delivered", "delivered_bytes", "dropped_queue", "dropped_loss", "dropped_down",
            "dropped_receiver")


def _name(pair: bytes) -> str:
    return f"{socket.inet_ntoa(pair[:4])}>{socket.inet_ntoa(pair[4:])}"


def serve(control) -> None:
    config = json.loads(control.readline())
    endpoints = {socket.inet_aton(addr): open_tun(path, name) for path, name, addr in config["endpoints"]}
    relay = Relay(endpoints)
    offloaded: dict[int, bool] = {}

    def set_links(links) -> None:
        relay.set_links(links)
        for fd, on in relay.offloads().items():
            if offloaded.get(fd) != on:
                set_offload(fd, on)
                offloaded[fd] = on

    set_links(config["links"])
    poller = select.epoll()
    for fd in endpoints.values():
        poller.register(fd, select.EPOLLIN)
    control_fd = control.fileno()
    os.set_blocking(control_fd, False)
    poller.register(control_fd, select.EPOLLIN)
    print("ready", flush=True)
    pending = b""
    last_traffic = 0.0
    while True:
        wait = relay.deliver_due()
        timeout = -1 if wait is None else (0 if wait < SPIN_S else wait - SPIN_S)
        if time.monotonic() - last_traffic < BUSY_POLL_S:
            timeout = 0
        for fd, _ in poller.poll(timeout):
            if fd != control_fd:
                relay.receive(fd)
                last_traffic = time.monotonic()
                continue
            chunk = os.read(control_fd, 65536)
            if not chunk:
                return  # the owner went away: stop
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                message = json.loads(line)
                if message.get("stop"):
                    return
                if message.get("held"):
                    print(json.dumps(relay.take_held_ms()), flush=True)
                    continue
                if message.get("counters"):
                    print(json.dumps(relay.counters()), flush=True)
                    continue
                set_links(message.get("links", []))
                print("ok", flush=True)


if __name__ == "__main__":
    serve(sys.stdin.buffer)
