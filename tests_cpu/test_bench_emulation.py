"""Benchmarks of the emulated network (pytest-benchmark JSON): userspace link throughput at zero
added delay (aim: 1 GB/s on a 2-core machine), RTT per Table I target, slice bring-up and teardown."""
import time

import pytest

from harness import slices
from harness.emulation import netns
from harness.emulation.network import EmulatedNetwork, measure_rtt, measure_throughput
from harness.emulation.ray_cluster import RayCluster

MISSING = netns.missing_privileges()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(scope="module")
def net():
    with EmulatedNetwork(slices.load("UTAH-GPN"), rtt_ms=0.0) as network:
        yield network


def test_userspace_link_throughput_at_zero_delay(benchmark, net):
    nbytes = 1 << 30
    net.set_rtt(0.0)
    rates = []
    benchmark.pedantic(lambda: rates.append(measure_throughput(net, "vm1", "vm2", nbytes)), rounds=3)
    benchmark.extra_info.update(bytes=nbytes, bytes_per_s=max(rates), all_bytes_per_s=rates)


@pytest.mark.parametrize("target", [0.1, 20.2, 57.4, 95.9, 103.0])
def test_rtt_per_target(benchmark, net, target):
    net.set_rtt(target)
    measured = benchmark.pedantic(lambda: measure_rtt(net, "vm1", "vm2", count=10), rounds=1)
    benchmark.extra_info.update(target_rtt_ms=target, rtt_ms=measured, error_ms=measured - target)


def test_bring_up_and_teardown(benchmark):
    phases = {}

    def cycle():
        start = time.perf_counter()
        with EmulatedNetwork(slices.load("UTAH-GPN")):
            phases["up_s"] = time.perf_counter() - start
            start = time.perf_counter()
        phases["down_s"] = time.perf_counter() - start

    benchmark.pedantic(cycle, rounds=3)
    benchmark.extra_info.update(phases)


def test_bring_up_and_teardown_with_ray(benchmark):
    phases = {}

    def cycle():
        start = time.perf_counter()
        with EmulatedNetwork(slices.load("UTAH-GPN")) as net, RayCluster(net):
            phases["up_s"] = time.perf_counter() - start
            start = time.perf_counter()
        phases["down_s"] = time.perf_counter() - start

    benchmark.pedantic(cycle, rounds=1)
    benchmark.extra_info.update(phases)
