"""The delay link's netem-like parts, each checked on its own (no namespaces needed): loss, the
Gilbert-Elliott bursts, jitter that reorders unless a rate holds the order, and the queue limit,
with every drop counted by cause."""
import os
import random
import socket
import statistics
import struct
import time

import pytest

from harness.backends.emulation.delaylink import VNET_HDR, Direction, Relay, _pareto

pytestmark = pytest.mark.slow  # moves real traffic through the delay link


@pytest.fixture(autouse=True)
def seeded():
    random.seed(1234)  # the draws are the link's own; a seed makes the statistics below reproducible


def test_random_loss_drops_the_given_fraction():
    d = Direction(out=-1, delay=0.0, loss=0.05)
    lost = sum(d.lost() for _ in range(40_000)) / 40_000
    assert 0.045 <= lost <= 0.055, lost


def test_gilbert_elliott_loses_in_bursts_at_its_stationary_rate():
    """p = 1%, r = 25%, every packet lost in the bad state: the loss rate is p / (p + r) = 3.8%
    and the bursts last 1 / r = 4 packets on average, where independent loss would give 1.04."""
    d = Direction(out=-1, delay=0.0, gemodel=(0.01, 0.25, 1.0, 0.0))
    outcomes = [d.lost() for _ in range(200_000)]
    rate = sum(outcomes) / len(outcomes)
    bursts, run = [], 0
    for lost in outcomes:
        if lost:
            run += 1
        elif run:
            bursts.append(run)
            run = 0
    assert 0.033 <= rate <= 0.044, rate
    assert 3.4 <= statistics.mean(bursts) <= 4.6, statistics.mean(bursts)


def test_jitter_reorders_packets_unless_a_rate_holds_them_in_order():
    free = Direction(out=-1, delay=0.010, jitter=0.005, distribution="normal")
    dues = [free.due(i * 1e-4, 1500) for i in range(200)]
    assert any(b < a for a, b in zip(dues, dues[1:])), "jitter alone should let packets overtake"
    capped = Direction(out=-1, delay=0.010, jitter=0.005, distribution="normal", rate=125e6)
    dues = [capped.due(i * 1e-4, 1500) for i in range(200)]
    assert dues == sorted(dues)  # netem's rate keeps a direction's packets in order


@pytest.mark.parametrize("distribution", ["uniform", "normal", "pareto"])
def test_jitter_has_the_given_spread_around_the_delay(distribution):
    d = Direction(out=-1, delay=0.050, jitter=0.004, distribution=distribution)
    delays = [d.due(0.0, 1500) for _ in range(20_000)]
    assert abs(statistics.mean(delays) - 0.050) < 0.0004
    spread = {"uniform": 0.004 / 3 ** 0.5, "normal": 0.004, "pareto": 0.004}[distribution]
    assert 0.85 * spread <= statistics.pstdev(delays) <= 1.15 * spread


def test_pareto_jitter_has_a_heavier_tail_than_normal():
    draws = [_pareto() for _ in range(50_000)]
    beyond = sum(z > 3 for z in draws) / len(draws)
    assert beyond > 3 * 0.00135, beyond  # a normal puts 0.135% beyond 3 sigma


def packet(src: str, dst: str, payload: bytes = b"x" * 100) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0, 64, 17, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))
    return bytes(VNET_HDR) + header + payload  # a plain packet: no offload flags


def pair():
    """Two ends of a datagram pipe: a TUN's read and write keep packet boundaries, so does this."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def test_a_full_queue_drops_the_newcomers_and_counts_them():
    """netem's limit: a direction holding `limit` packets drops the next, and the drop is
    counted; once the queue drains, packets pass again."""
    vm1_side, vm1_tun = pair()
    vm2_side, vm2_tun = pair()
    relay = Relay({socket.inet_aton("198.18.0.1"): vm1_tun.fileno(), socket.inet_aton("198.18.0.2"): vm2_tun.fileno()})
    relay.set_links([{"src": "198.18.0.1", "dst": "198.18.0.2", "delay_s": 0.05, "limit": 5}])
    for _ in range(8):
        vm1_side.send(packet("198.18.0.1", "198.18.0.2"))
    relay.receive(vm1_tun.fileno())
    counts = relay.counters()["198.18.0.1>198.18.0.2"]
    assert (counts["packets"], counts["dropped_queue"]) == (8, 3)
    deadline = time.monotonic() + 5
    while relay.deliver_due() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert relay.counters()["198.18.0.1>198.18.0.2"]["delivered"] == 5
    # the IP packets' bytes, as a technique put them on the wire: header and payload, no virtio header
    assert relay.counters()["198.18.0.1>198.18.0.2"]["delivered_bytes"] == 5 * (20 + 100)
    received = 0
    while True:
        try:
            os.read(vm2_side.fileno(), 65536)
            received += 1
        except BlockingIOError:
            break
    assert received == 5
    vm1_side.send(packet("198.18.0.1", "198.18.0.2"))  # the queue drained: room again
    relay.receive(vm1_tun.fileno())
    assert relay.counters()["198.18.0.1>198.18.0.2"]["dropped_queue"] == 3


def test_a_direction_taken_down_counts_what_it_drops():
    vm1_side, vm1_tun = pair()
    _, vm2_tun = pair()
    relay = Relay({socket.inet_aton("198.18.0.1"): vm1_tun.fileno(), socket.inet_aton("198.18.0.2"): vm2_tun.fileno()})
    relay.set_links([{"src": "198.18.0.1", "dst": "198.18.0.2", "delay_s": 0.0}])
    relay.set_links([{"src": "198.18.0.1", "dst": "198.18.0.2", "delay_s": None}])
    vm1_side.send(packet("198.18.0.1", "198.18.0.2"))
    relay.receive(vm1_tun.fileno())
    assert relay.counters()["198.18.0.1>198.18.0.2"]["dropped_down"] == 1
