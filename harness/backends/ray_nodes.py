"""Ray on an emulated slice, as on the paper's: one Ray node per VM, started inside the VM's namespace,
the head on VM1 and a worker on every other VM, each with its own temp dir, no dashboard and no
usage stats, a custom resource naming its VM, and the VM's CPU count. No log monitor either: it
forwards workers' output to drivers that ask for it, and ours does not (log_to_driver=False; the
output stays in the node's logs); without it a node starts sooner (tests_cpu/test_bench_emulation.py
times bring-up). GPUs are not Ray's to hand out here: the driver is told each
VM's processes and GPUs (harness.backends.layout), which may share this machine's GPUs.

The driver runs where the paper's ran, on VM1 (a Ray driver needs a local node): RayCluster.driver()
starts it inside VM1's namespace (harness.backends.driver_client); on a live slice the same client
starts it on this machine.

The cluster's nodes and its driver share a token of their own, given in the environment. Ray
(2.52 and later) otherwise decides authentication from ~/.ray/auth_token, which any plain
`ray.init()` on this machine writes: the head would then demand a token that the other nodes
never send, and vm2 would fail to join.
"""
import json
import os
import secrets
import shutil
import sys

from harness.backends.driver_client import DriverClient
from harness.backends.emulation import netns
from harness.backends.emulation.compute import VMQuotas
from harness.backends.emulation.network import EmulatedNetwork
from harness.backends.worker import inherited

PORT = 6379
OBJECT_STORE_BYTES = 100 * 2**20  # Ray's minimum is 75 MiB; the suite moves no large objects
# How long a node's processes get to honour SIGTERM before SIGKILL. Measured on a 2-node cluster:
# every process but Ray's daemons was gone 0.1 s after SIGTERM, and the daemons (gcs_server, the
# raylets, the autoscaler's monitor, the runtime-env agents) were all still running 4 s after it,
# so a longer grace only puts off their SIGKILL (netns.stop's default of 3 s cost every teardown 3 s).
STOP_GRACE_S = 1.0


def share_cores(vms: list[str]) -> dict[str, set[int]]:
    """This machine's cores dealt out to the emulated VMs, an equal share each (shared round-robin
    when there are more VMs than cores). Pinned this way, a VM computes at the same speed whether or
    not the other VMs are busy, so one VM's run is not handed the whole machine (the paper's VMs
    did not share GPUs) and timings of one VM and of all VMs compare fairly."""
    cpus = sorted(os.sched_getaffinity(0))
    per = max(1, len(cpus) // len(vms))
    return {vm: ({cpus[(i * per + k) % len(cpus)] for k in range(per)}) for i, vm in enumerate(vms)}


def taskset(cores: set[int]) -> list[str]:
    return ["taskset", "--cpu-list", ",".join(map(str, sorted(cores)))]


class RayCluster:
    def __init__(self, net: EmulatedNetwork, gpu_shares: dict[str, dict[str, float]] | None = None):
        """gpu_shares: on CPU, each slice's VMs' GPU speeds (harness.backends.emulation.compute.shares), which
        every VM's node then computes at; None: every VM at its cores' full speed."""
        self.net = net
        # Ray's CLI as a module of this interpreter: no console script need sit beside it (the lent
        # GPU machine gets Ray on PYTHONPATH, tests_gpu/device_bundle.sh).
        self.ray = [sys.executable, "-m", "ray.scripts.scripts"]
        self.temp = {vm: netns.scratch(name) for vm, name in net.netns.items()}  # removed with the namespace
        self.head = net.slice.vms[0].name
        self.address = f"{net.address[self.head]}:{PORT}"
        self.started: list[str] = []
        self.cores = share_cores([vm.name for vm in net.slice.vms])
        self.quotas = VMQuotas(net.netns, {vm: len(c) for vm, c in self.cores.items()},
                               gpu_shares or {net.slice.name: {vm.name: 1.0 for vm in net.slice.vms}})
        # What a process needs to join this cluster (Ray reads RAY_AUTH_TOKEN before any token file).
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.env = {**inherited(os.environ), **self.auth}

    def __enter__(self) -> "RayCluster":
        self.quotas.__enter__()
        try:
            self.quotas.use_slice(self.net.slice.name)
            for vm in self.net.slice.vms:
                self._start(vm)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, vm) -> None:
        role = (["--head", "--port", str(PORT), "--include-dashboard=false"] if vm.name == self.head
                else ["--address", self.address])
        argv = [*self.ray, "start", *role, "--node-ip-address", self.net.address[vm.name],
                "--temp-dir", str(self.temp[vm.name]), "--disable-usage-stats", "--include-log-monitor=false",
                "--num-cpus", str(vm.cores or 1), "--num-gpus", "0",
                "--resources", json.dumps({vm.name: 1}), "--object-store-memory", str(OBJECT_STORE_BYTES)]
        self.started.append(vm.name)
        # The affinity is inherited by the raylet and every actor and worker it starts.
        result = self.net.run(vm.name, [*taskset(self.cores[vm.name]), *argv], outside=self.quotas.enter(vm.name),
                              timeout=120, capture_output=True, text=True, env=self.env)
        if result.returncode:
            raise RuntimeError(f"ray start on {vm.name} failed: {result.stderr.strip().splitlines()[-1]}")

    def stop(self) -> None:
        # Not `ray stop`: it finds Ray processes by name on the whole machine, so it would also
        # stop every other Ray cluster here (another slice's, the user's own). Only the process
        # trees started for this cluster's nodes are stopped, all nodes together.
        netns.stop({self.net.netns[vm]: str(self.temp[vm]) for vm in self.started}, grace_s=STOP_GRACE_S)
        for vm in self.started:
            shutil.rmtree(self.temp[vm], ignore_errors=True)
        self.started = []
        self.quotas.close()

    def driver(self) -> DriverClient:
        """A driver session on VM1 (close it, or use it as a context manager)."""
        return DriverClient([*self.quotas.enter(self.head), "ip", "netns", "exec", self.net.netns[self.head],
                             *taskset(self.cores[self.head])],
                      self.address, [vm.name for vm in self.net.slice.vms], env=self.env)

    def drive(self, request: dict, timeout: float = 900):
        """Run the driver on VM1 with this one request; returns its answer."""
        with self.driver() as d:
            return d.request(request, timeout)
