"""Benchmarks of the emulated network (pytest-benchmark JSON): userspace link throughput at zero
added delay (aim: 1 GB/s on a 2-core machine, asserted with room for a busy machine), slice
bring-up and teardown. The RTT per Table I target is benchmarked and asserted in test_emulation."""
import time

import pytest

from harness.backends.emulation.network import EmulatedNetwork, measure_throughput
from harness.backends.ray_nodes import RayCluster
from harness.platform import slices

# slow: benchmarks emulated slices
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("emulation")]


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
    # The aim is 1 GB/s (measured 1.05-1.15 on an idle 2-core machine); a quarter of it still
    # carries the scale model's traffic, and a link that drops or serialises packets falls far below.
    assert max(rates) >= 0.25e9, f"{max(rates) / 1e6:.0f} MB/s"


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
