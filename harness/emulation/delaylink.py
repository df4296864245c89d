"""The userspace delay link: what tc netem does, for kernels without sch_netem (mahimahi's mm-delay idea).

Each emulated VM's namespace gets a TUN device; this relay process holds all of them. A packet
read from VM a's TUN and addressed to VM b waits in a timed queue for the one-way delay of the
pair (a, b), then is written to b's TUN. The delay is on the packets, so TCP sees a real RTT:
slow start, window / RTT throughput, retransmissions. An optional rate per pair adds
serialisation time, as a bandwidth cap.

Run as `python -m harness.emulation.delaylink` with one JSON object on the first line of stdin:
    {"endpoints": [["/var/run/netns/<ns>", "tun0", "198.18.0.1"], ...],
     "links": [["198.18.0.1", "198.18.0.2", one_way_delay_s, rate_bytes_per_s or null], ...]}
(a delay of null takes that direction of the link down: its packets are dropped).
It prints `ready` once every TUN exists. Later lines change links live ({"links": [...]}, answered
`ok`), ask how long the link held the packets it released since the last such question
({"held": true}, answered {"src>dst": [ms, ...]}: the latest HELD_KEPT per direction), or stop it
({"stop": true}); end of stdin stops it too. Stopping closes the TUNs, which removes them.
"""
import ctypes
import fcntl
import heapq
import json
import os
import select
import socket
import struct
import sys
import time
from collections import defaultdict, deque

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
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
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
        return fd
    finally:
        _setns(home)
        os.close(home)
        os.close(target)


class Relay:
    def __init__(self, endpoints: dict[bytes, int]):
        self.fd_of = endpoints  # IPv4 address (4 bytes) -> TUN fd
        # source + destination address (the 8 bytes at offset 12 of an IPv4 header) -> link
        self.route: dict[bytes, tuple[int, float, float | None]] = {}
        self.free_at: dict[bytes, float] = {}
        self.queue: list = []  # (due, seq, out_fd, packet, arrived)
        self.seq = 0
        # What the link adds, measured where it is added: from a packet's read to its release.
        self.held: dict[bytes, deque] = defaultdict(lambda: deque(maxlen=HELD_KEPT))

    def set_links(self, links) -> None:
        """(src, dst, one-way delay s, rate B/s or None); a delay of None takes the link down."""
        for src, dst, delay, rate in links:
            pair = socket.inet_aton(src) + socket.inet_aton(dst)
            if delay is None:
                self.route.pop(pair, None)
            elif pair[4:] in self.fd_of:
                self.route[pair] = (self.fd_of[pair[4:]], float(delay), rate)

    def receive(self, fd: int) -> None:
        route, queue = self.route, self.queue
        while True:
            try:
                packet = os.read(fd, 65536)
            except BlockingIOError:
                return
            link = route.get(packet[12:20])
            if link is None or packet[0] >> 4 != 4:
                continue  # not IPv4 between two VMs (e.g. IPv6 router solicitations): dropped
            out, delay, rate = link
            now = time.monotonic()
            if delay == 0.0 and rate is None and not queue:
                self.held[packet[12:20]].append(0.0)
                self._write(out, packet)  # the fast path: nothing to wait for
                continue
            depart = now
            if rate:
                key = packet[12:20]
                depart = max(now, self.free_at.get(key, now)) + len(packet) / rate
                self.free_at[key] = depart
            heapq.heappush(queue, (depart + delay, self.seq, out, packet, now))
            self.seq += 1

    def deliver_due(self) -> float | None:
        """Write every packet whose time has come; seconds until the next one, or None."""
        while self.queue:
            now = time.monotonic()
            due = self.queue[0][0]
            if due > now:
                return due - now
            _, _, out, packet, arrived = heapq.heappop(self.queue)
            self.held[packet[12:20]].append(now - arrived)  # the write's own cost is the machine's, as at no delay
            self._write(out, packet)
        return None

    def take_held_ms(self) -> dict[str, list[float]]:
        held = {f"{socket.inet_ntoa(pair[:4])}>{socket.inet_ntoa(pair[4:])}": [t * 1e3 for t in times]
                for pair, times in self.held.items()}
        self.held.clear()
        return held

    @staticmethod
    def _write(fd: int, packet: bytes) -> None:
        try:
            os.write(fd, packet)
        except BlockingIOError:
            pass  # the receiving queue is full: the packet is lost, as on a congested link


def serve(control) -> None:
    config = json.loads(control.readline())
    endpoints = {socket.inet_aton(addr): open_tun(path, name) for path, name, addr in config["endpoints"]}
    relay = Relay(endpoints)
    relay.set_links(config["links"])
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
                relay.set_links(message.get("links", []))
                print("ok", flush=True)


if __name__ == "__main__":
    serve(sys.stdin.buffer)
