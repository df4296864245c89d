"""Emulated slices: real packets through a delayed link between namespaces, a real Ray cluster, no leaks."""
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.backends.driver_client import DriverClient, DriverError
from harness.backends.emulation import netns, probe
from harness.backends.emulation.network import (
    MTU,
    EmulatedNetwork,
    measure_rtt,
    measure_throughput,
    tcp_window_bytes,
)
from harness.backends.ray_nodes import RayCluster
from harness.platform import slices
from harness.runs.jobs import Job
from tests_cpu.leaks import back_to, interruptible, leftovers, stopped_at_exit, wait_until
from tests_cpu.techniques_setup import MODEL, TRAIN

# slow: brings up emulated slices (root, namespaces, Ray)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("emulation")]
TABLE_I_RTTS = sorted(sl.rtt_ms for sl in slices.table_i())


@pytest.fixture(scope="module")
def net():
    with EmulatedNetwork(slices.load("UTAH-GPN")) as network:
        yield network


@pytest.mark.parametrize("target", TABLE_I_RTTS)
def test_the_link_holds_each_packet_for_half_the_target_rtt_each_way(net, target):
    """Measured inside the link, from a packet's read to its write: never early, and the median
    within 5% + 0.02 ms of half the RTT. This is the check that resolves 0.1 ms, which a probe
    between two processes on a busy 2-core machine cannot (see the next test)."""
    net.set_rtt(target)
    net.held_ms()  # forget the packets of earlier tests
    measure_rtt(net, "vm1", "vm2")
    held = net.held_ms()
    for direction in (("vm1", "vm2"), ("vm2", "vm1")):
        times = sorted(held[direction])
        assert len(times) >= probe.PROBES, f"{direction}: {len(times)} packets held"
        median = times[len(times) // 2]
        assert times[0] >= target / 2 - 1e-6, f"{direction}: a packet left after {times[0]:.4f} ms"
        assert median <= 1.05 * target / 2 + 0.02, f"{direction}: median hold {median:.4f} ms for {target / 2} ms"


def added_rtt(net, target: float, rounds: int) -> tuple[float, float]:
    """What the link adds to the RTT at `target`, and the path's own RTT, measured side by side:
    the two alternate, so that a spell of load on the machine touches both and not one."""
    base, delayed = [], []
    for _ in range(rounds):
        net.set_rtt(0.0)
        base.append(measure_rtt(net, "vm1", "vm2"))
        net.set_rtt(target)
        delayed.append(measure_rtt(net, "vm1", "vm2"))
    return min(delayed) - min(base), min(base)


# On a busy machine a whole round of probes at no delay can be late: the relay keeps polling for a
# reply (BUSY_POLL_S) and the scheduler may leave a probe process waiting behind it on the one free
# core. With one core kept busy, 7 rounds in 80 were, their fastest probe 0.7-1.8 ms instead of
# about 0.2. Where the tolerance is below 1 ms, a round is cheap (its RTT is small), and more rounds
# make "every round late" negligible: (7/80)^8.
LATE_ROUND_MS = 1.0


@pytest.mark.parametrize("target", TABLE_I_RTTS)
def test_probes_see_the_target_rtt_added_within_5_percent_plus_0_5_ms(net, target, benchmark):
    """End to end, as ping reports it (the fastest of spaced UDP probes), less the path's own RTT.
    0.5 ms is the machine, not the link: on this 2-core VM with one core kept busy, the path's own
    fastest RTT ranged 0.1-0.5 ms from one second to the next (measured with 50 and 200 probes),
    so a 0.1 ms target is checked by the link's own account above. Also a benchmark (JSON)."""
    tolerance = 0.05 * target + 0.5
    rounds = 3 if tolerance >= LATE_ROUND_MS else 8
    added, base = benchmark.pedantic(lambda: added_rtt(net, target, rounds), rounds=1)
    benchmark.extra_info.update(target_rtt_ms=target, added_ms=added, base_rtt_ms=base, error_ms=added - target,
                                probe_rounds=rounds)
    assert abs(added - target) <= tolerance, f"probes see {added:.3f} ms added for {target} ms (base {base:.3f} ms)"
    assert base < 1.0, f"the path without delay takes {base:.3f} ms"


def test_slice_rtt_is_restored_after_a_sweep(net):
    net.set_rtt(57.4)
    net.set_rtt(None)
    net.held_ms()
    measure_rtt(net, "vm1", "vm2")
    times = sorted(net.held_ms()[("vm1", "vm2")])
    assert abs(times[len(times) // 2] - 20.2 / 2) <= 0.05 * 20.2 / 2 + 0.02, times[len(times) // 2]


def test_bulk_tcp_throughput_falls_as_window_over_rtt(net):
    """Tolerance: at each RTT the throughput of one connection is between 0.3 and 1.1 times
    window / RTT (slow start and ACK timing keep it below the bound), and the ratio to the bound
    varies by at most 1.6x across RTTs: throughput x RTT is about constant."""
    window = tcp_window_bytes(net, "vm1")
    ratios = []
    for rtt in (20.2, 57.4, 103.0):
        net.set_rtt(rtt)
        bound = window / (rtt / 1e3)
        measured = measure_throughput(net, "vm1", "vm2", int(bound * 2))
        ratios.append(measured / bound)
    assert all(0.3 <= r <= 1.1 for r in ratios), ratios
    assert max(ratios) / min(ratios) <= 1.6, ratios


def test_bandwidth_cap_limits_bulk_throughput():
    """A 0.4 Gbit/s cap (50 MB/s) at no delay: one connection gets 70-105% of it."""
    capped = dataclasses.replace(slices.load("UTAH-GPN"), bandwidth_gbps=0.4)
    with EmulatedNetwork(capped, rtt_ms=0.0) as network:
        measured = measure_throughput(network, "vm1", "vm2", 100 * 2**20)
    assert 0.7 * 50e6 <= measured <= 1.05 * 50e6, f"{measured / 1e6:.1f} MB/s"


def test_each_vm_has_its_own_address_and_hostname_mapping(net):
    for vm, address in net.address.items():
        out = net.run(vm, [sys.executable, "-c", "import socket; print(socket.gethostbyname(socket.gethostname()))"],
                      capture_output=True, text=True, check=True)
        assert out.stdout.strip() == address  # gloo binds to this: it must be the VM's own


# ---- Ray, as on the paper's slices ----

@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    # Started where another Ray has left its token in ~/.ray, as any plain `ray.init()` does.
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("f" * 64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        with EmulatedNetwork(slices.load("UTAH-GPN"), rtt_ms=0.1) as network, RayCluster(network) as cluster:
            yield cluster
    assert (home / ".ray" / "auth_token").read_text() == "f" * 64  # the user's token is left as it was


def test_ray_has_one_node_per_vm_with_its_resources(ray_cluster):
    nodes = {n["address"]: n["resources"] for n in ray_cluster.drive({"do": "nodes"})}
    assert set(nodes) == {"198.18.0.1", "198.18.0.2"}
    assert nodes["198.18.0.1"]["vm1"] == 1 and nodes["198.18.0.2"]["vm2"] == 1
    assert all(r["CPU"] == 12 for r in nodes.values())  # the VM's cores, from the slice file


def test_actor_pinned_to_vm2_sees_vm2s_address(ray_cluster):
    assert ray_cluster.drive({"do": "where"}) == {"vm1": "198.18.0.1", "vm2": "198.18.0.2"}


def test_the_vms_ray_nodes_take_no_xla_flags_of_the_process_that_starts_them(ray_cluster):
    """This process runs its one-process clusters with XLA flags of its own (conftest.py); an
    emulated VM's raylet, and so every worker it starts, must not inherit them."""
    assert "XLA_FLAGS" in os.environ
    temps = [str(t) for t in ray_cluster.temp.values()]
    raylets = {}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            environ = (proc / "environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # not a process, or one that ended meanwhile
            continue
        if argv and argv[0].endswith("raylet") and any(t in " ".join(argv) for t in temps):
            raylets[proc.name] = environ
    assert len(raylets) == len(temps), f"raylets found: {len(raylets)}, VMs: {len(temps)}"
    flagged = [pid for pid, environ in raylets.items() if any(v.startswith("XLA_FLAGS=") for v in environ)]
    assert not flagged, f"raylets (pids {flagged}) took this process's XLA_FLAGS"


def test_a_driver_without_the_clusters_token_is_refused(ray_cluster):
    """The same driver as in the tests above, from the same place, less the token. Both give the
    GCS 3 tries instead of Ray's 20 (a second each, RAY_NUM_REDIS_GET_RETRIES): the one with the
    token still gets in, so the token, not the patience, is what keeps the other out."""
    def driver(env):
        return DriverClient(["ip", "netns", "exec", ray_cluster.net.netns["vm1"]], ray_cluster.address,
                            ["vm1", "vm2"], env={**env, "RAY_NUM_REDIS_GET_RETRIES": "3"})

    with driver(ray_cluster.env) as insider:
        assert len(insider.request({"do": "nodes"}, timeout=120)) == 2
    without = {k: v for k, v in ray_cluster.env.items() if k not in ray_cluster.auth}
    refused = f"cannot join the Ray cluster at {ray_cluster.address}: AuthenticationError: .*InvalidAuthToken"
    with driver(without) as outsider, pytest.raises(DriverError, match=refused):
        outsider.request({"do": "nodes"}, timeout=120)


# Training is under way once its gradients cross the link: start-up's own traffic (Ray, and
# jax.distributed while both VMs compile) was about 300 packets over the 26-28 s it took on a quiet
# machine, 10 a second; training then sent about 4,000 a second.
TRAINING_PACKETS = 2000


def test_link_down_mid_trial_fails_clearly_within_heartbeat_plus_15_s():
    """The bound: a run whose link goes down while it trains fails within the heartbeat timeout
    given to jax.distributed (here 10 s) plus 15 s, with an error that says what happened."""
    heartbeat = 10
    request = {"do": "train", "devices_per_host": 2, "heartbeat_s": heartbeat}
    said = f"stopped answering for {heartbeat} s \\(its VM died or the link to it is down\\)"
    job = Job("Data", dataclasses.asdict(MODEL), 2, 2, train={**dataclasses.asdict(TRAIN), "steps": 100_000})
    with EmulatedNetwork(slices.load("UTAH-GPN"), rtt_ms=1.0) as network, RayCluster(network) as cluster:
        cut, ended = {}, threading.Event()
        start_up = network.counters()["vm1>vm2"]["packets"]

        def take_link_down_once_training():
            while not ended.wait(0.2):
                if network.counters()["vm1>vm2"]["packets"] - start_up >= TRAINING_PACKETS:
                    network.set_link("vm1", "vm2", up=False)
                    cut["at"] = time.monotonic()
                    return

        watcher = threading.Thread(target=take_link_down_once_training)
        watcher.start()
        try:
            with pytest.raises(RuntimeError, match=said) as failure:
                cluster.drive({**request, "jobs": [job.to_dict()]})
        finally:
            ended.set()
            watcher.join()
        assert "at" in cut, f"the run failed before it trained: {failure.value}"
        assert time.monotonic() - cut["at"] <= heartbeat + 15


# ---- teardown ----

BRING_UP = """
import sys, time
from harness.platform import slices
from harness.backends.emulation.network import EmulatedNetwork
from harness.backends.ray_nodes import RayCluster
with EmulatedNetwork(slices.load("UTAH-GPN")) as net, RayCluster(net):
    print("up", flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def slice_process(before: dict):
    """A slice brought up by another process, once its two namespaces and two raylets are seen;
    stopped when the block ends, whatever happened in it."""
    proc = subprocess.Popen([sys.executable, "-c", BRING_UP], stdout=subprocess.PIPE, text=True, preexec_fn=interruptible)
    with stopped_at_exit(proc):
        assert proc.stdout.readline().strip() == "up"
        wait_until(lambda: (len(leftovers()["namespaces"] - before["namespaces"]) == 2
                            and leftovers()["raylets"] == before["raylets"] + 2), 60, "the slice's namespaces and raylets")
        yield proc


def test_ctrl_c_in_the_middle_leaves_nothing_behind(net, ray_cluster):
    before = leftovers()
    with slice_process(before) as proc:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert back_to(before) == before


STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as Ray's daemons do for 10 s or more
print("ready", flush=True)
time.sleep(600)
"""


def test_stopping_a_slices_processes_kills_what_ignores_sigterm_after_one_grace_period_for_all(net):
    """What a Ray cluster's teardown does (netns.stop): the marked trees in every VM get SIGTERM,
    then, after one grace period shared by all VMs (not one each), SIGKILL; the rest is left."""
    def start(vm, *argv):
        proc = net.popen(vm, [sys.executable, "-c", STUBBORN, *argv], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        return proc

    marker = "fh-test-stop-marker"
    marked = [start(vm, marker) for vm in ("vm1", "vm2")]
    other = start("vm1")
    try:
        began = time.monotonic()
        netns.stop({net.netns["vm1"]: marker, net.netns["vm2"]: marker}, grace_s=3)
        took = time.monotonic() - began
        assert [p.wait(timeout=10) for p in marked] == [-signal.SIGKILL] * 2
        assert 3 <= took < 6, f"{took:.1f} s for a grace period of 3 s"
        assert other.poll() is None  # not marked: not ours to stop
    finally:
        for p in [*marked, other]:
            p.kill()
            p.wait()


def test_start_up_sweep_removes_what_a_crash_left(net):
    before = leftovers()
    with slice_process(before) as proc:
        crashed = leftovers()["namespaces"] - before["namespaces"]
        proc.send_signal(signal.SIGKILL)  # no teardown at all
        proc.wait()
        assert crashed <= set(netns.sweep())
    # The relay stops by itself when its owner's pipe closes; Ray dies with the namespaces.
    assert back_to(before) == before


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv to drop root")
def test_without_root_the_cli_says_what_is_missing():
    import harness

    nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    # A checkout or venv in a directory only root may enter (as mktemp -d makes it) is out of its
    # reach; anything else that stops the command as uid 65534 is the command's failure.
    # The probe runs none of harness's code, so that a failure of that code fails the test.
    reach = subprocess.run([*nobody, sys.executable, "-c", f"open({harness.__file__!r}).close()"],
                           capture_output=True, text=True)
    if reach.returncode != 0:
        why = (reach.stderr.strip().splitlines() or [f"exit {reach.returncode}"])[-1]
        pytest.skip(f"uid 65534 cannot run {sys.executable} or read {harness.__file__}: {why}")
    proc = subprocess.run([*nobody, sys.executable, "-m", "harness", "emulate", "--slice", "UTAH-GPN"],
                          capture_output=True, text=True, env={**os.environ, "HOME": "/tmp"})
    assert proc.returncode == 2
    assert "emulated slices need root (network namespaces and TUN devices)" in proc.stderr.splitlines()[-1]


@pytest.mark.skipif(netns.has_netem(), reason="this kernel has sch_netem: forcing netem works (test_netem.py)")
def test_forcing_netem_says_why_it_cannot_be_used():
    proc = subprocess.run([sys.executable, "-m", "harness", "emulate", "--mechanism", "netem"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"the netem delay mechanism cannot be used: {netns.netem_missing()}; " in proc.stderr.splitlines()[-1]


def test_emulate_command_probes_and_tears_down_and_predict_rests_on_what_it_measured(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "emulate", "--slice", "UTAH-MASS", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    pair = report["pairs"][0]
    assert report["mechanism"] == ("netem" if netns.has_netem() else "userspace") and pair["target_rtt_ms"] == 57.4
    if not netns.has_netem():  # auto says why it fell back
        assert f"the userspace delay link, as netem cannot be used here: {netns.netem_missing()}" in proc.stderr
    assert abs(pair["rtt_error_ms"]) <= 0.05 * 57.4 + 0.3
    # One flow at the slice's RTT is held near its window per round trip; at no added delay the
    # link carries far more (the device machine's 142 MB/s at 20.2 ms was the window, not the link).
    assert report["link_bytes_per_s"] > 2 * pair["throughput_bytes_per_s"]
    assert not any(name in netns.ours() for name in (v["netns"] for v in report["vms"].values()))
    # The cost model calibrated from that probe: its RTT, and one flow's rate x RTT as the window.
    (tmp_path / "link.json").write_text(proc.stdout)
    proc = subprocess.run([sys.executable, "-m", "harness", "predict", "--slice", "UTAH-MASS", "--tokens", "1e6",
                           "--link", str(tmp_path / "link.json"), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rtt_ms"] == pair["rtt_ms"] and result["network"]["measured"]["rtt_ms"] == pair["rtt_ms"]
    assert result["network"]["window_bytes"] == pytest.approx(pair["throughput_bytes_per_s"] * pair["rtt_ms"] / 1e3)


def test_a_change_of_delay_forgets_what_tcp_learned_of_the_old_one(net):
    """Linux starts a connection from the RTT and ssthresh it cached for the peer (tcp_metrics);
    after a live change of delay those belong to another link, so the change flushes them."""
    def cached(vm: str) -> str:
        return net.run(vm, ["ip", "tcp_metrics", "show"], capture_output=True, text=True, check=True).stdout

    net.set_rtt(0.0)
    measure_throughput(net, "vm1", "vm2", 8 * 2**20)
    assert net.address["vm2"] in cached("vm1")
    net.set_rtt(20.2)
    assert cached("vm1").strip() == "" and cached("vm2").strip() == ""


def test_a_delay_only_link_carries_tso_segments_and_a_shaped_one_mtu_packets(net):
    """Where a direction only delays, the VM hands the relay TCP segments of up to 64 kB (as to a
    virtio NIC): far fewer packets than bytes / MTU. Where it acts on packets (here a rate), its
    queue, loss and pacing see MTU-sized packets, as netem's on a veth with offloads off."""
    if net.mechanism != "userspace":
        pytest.skip("the netem mechanism's veths always run with offloads off; this checks the relay")
    nbytes = 32 * 2**20

    def packets_for_one_transfer() -> int:
        before = net.counters()["vm1>vm2"]["packets"]
        measure_throughput(net, "vm1", "vm2", nbytes)
        return net.counters()["vm1>vm2"]["packets"] - before

    original = net.slice
    net.set_rtt(0.0)
    try:
        assert packets_for_one_transfer() < nbytes / (2 * MTU)
        net.use_slice(dataclasses.replace(original, bandwidth_gbps=4.0))
        net.set_rtt(0.0)
        assert packets_for_one_transfer() >= nbytes / MTU
    finally:
        net.use_slice(original)


def test_every_vm_runs_cubic_and_records_say_so(net):
    """Linux's default congestion control, as on the paper's VMs unless they were tuned; a namespace
    would inherit the machine's (BBR on some), whose 10 s minimum-RTT memory throttles a sweep's
    live connections."""
    if "cubic" not in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split():
        pytest.skip("this kernel has no CUBIC (tcp_available_congestion_control)")
    for vm in net.netns:
        running = net.run(vm, ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"], capture_output=True, text=True)
        assert running.stdout.strip() == "cubic", vm
    assert {s["tcp_congestion_control"] for s in net.settings().values()} == {"cubic"}
