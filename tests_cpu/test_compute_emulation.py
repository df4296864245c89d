"""The emulated VMs' GPUs at their relative speeds (harness.backends.emulation.compute): real CPU quotas on
real cgroups, measured by the kernel's own throttling counters, and nothing left behind."""
import subprocess
import sys
import time

import pytest

from harness.backends.emulation import compute, netns
from harness.backends.emulation.network import EmulatedNetwork
from harness.backends.ray_nodes import share_cores, taskset
from harness.platform import hardware, slices

# slow: brings up emulated slices with CPU quotas (root, cgroups)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("emulation")]

BUSY_S = 1.0
# Prints the CPU time a busy loop of BUSY_S wall seconds got.
BUSY = f"import time; t = time.monotonic(); c = time.process_time()\nwhile time.monotonic() - t < {BUSY_S}: pass\n" \
       "print(time.process_time() - c)"


def test_each_vm_gets_its_gpus_speed_against_the_fastest_gpu_of_the_run():
    """One reference for the whole run: the data sheets' peaks at the stated precision."""
    mixed, fast = slices.load("TACC-TACC"), slices.load("UTAH-MASS")
    peak = lambda vm: vm.accelerator.peak_tflops("float32")
    shares = compute.shares([mixed, fast])
    fastest = max(peak(vm) for sl in (mixed, fast) for vm in sl.vms)
    for sl in (mixed, fast):
        assert shares[sl.name] == {vm.name: peak(vm) / fastest for vm in sl.vms}
    t4, rtx = hardware.accelerator("T4"), hardware.accelerator("RTX6000")
    assert shares["TACC-TACC"]["vm2"] == pytest.approx(t4.peak_tflops_fp32 / rtx.peak_tflops_fp32)
    assert max(shares["TACC-TACC"].values()) <= 1.0


def busy_in(net: EmulatedNetwork, quotas: compute.VMQuotas, vm: str, cores: set[int]) -> float:
    """CPU seconds a busy loop got in BUSY_S on vm, inside its cgroup and on its cores."""
    out = net.run(vm, [*taskset(cores), sys.executable, "-c", BUSY], outside=quotas.enter(vm), capture_output=True,
                  text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


def throttled(quotas: compute.VMQuotas, vm: str) -> int:
    """How many periods the kernel held vm's cgroup back for its quota."""
    stat = dict(line.split() for line in (quotas.groups[vm] / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


def test_a_slower_gpus_vm_gets_no_more_cpu_than_its_share_and_the_fastest_is_not_held_back():
    """The T4 VM of TACC-TACC computes at most its share of a core (a hard cap: a busy machine
    gives it less, never more), and the kernel throttled it; the RTX VM was never throttled."""
    problem = compute.missing()
    if problem:
        pytest.skip(problem)
    sl = slices.load("TACC-TACC")
    shares = compute.shares([sl])
    with EmulatedNetwork(sl) as net:
        cores = share_cores([vm.name for vm in sl.vms])
        with compute.VMQuotas(net.netns, {vm: len(c) for vm, c in cores.items()}, shares) as quotas:
            quotas.use_slice(sl.name)
            assert quotas.shares_of(["vm1", "vm2"]) == shares[sl.name]
            assert {g.name for g in quotas.groups.values()} <= compute.ours()
            slow = busy_in(net, quotas, "vm2", cores["vm2"])
            fast = busy_in(net, quotas, "vm1", cores["vm1"])
            period_s = compute.PERIOD_US / 1e6
            assert slow <= shares[sl.name]["vm2"] * len(cores["vm2"]) * (BUSY_S + period_s) + 0.02, \
                f"the T4 VM got {slow:.3f} CPU s in {BUSY_S} s"
            assert throttled(quotas, "vm2") > 0 and throttled(quotas, "vm1") == 0
            assert fast > 0
        assert not compute.ours() & set(net.netns.values()), "a quota outlived its cluster"


def test_a_run_of_equal_gpus_sets_no_quota():
    sl = slices.load("UTAH-MASS")
    assert set(compute.shares([sl])[sl.name].values()) == {1.0}
    quotas = compute.VMQuotas({vm.name: f"{netns.PREFIX}x-{vm.name}" for vm in sl.vms}, {"vm1": 1, "vm2": 1},
                              compute.shares([sl]))
    assert not quotas.limited and quotas.groups == {} and quotas.enter("vm1") == []


def test_the_start_up_sweep_removes_a_quota_a_crash_left():
    """A cgroup named for a namespace that no longer exists is a crash's leftover."""
    if compute.missing():
        pytest.skip(compute.missing())
    root, _ = compute._controller()
    left = root / f"{netns.PREFIX}gone{int(time.time())}-vm2"
    left.mkdir()
    try:
        sleeper = subprocess.Popen(["sh", "-c", f'echo $$ > {left / "cgroup.procs"} && exec sleep 30'])
        time.sleep(0.2)
        assert left.name in compute.sweep() and not left.exists()
        sleeper.kill()
        sleeper.wait()
    finally:
        if left.exists():
            for pid in (left / "cgroup.procs").read_text().split():
                (root / "cgroup.procs").write_text(pid)
            left.rmdir()
