"""Ray on an emulated slice, as on the paper's: one Ray node per VM, started inside the VM's namespace,
the head on VM1 and a worker on every other VM, each with its own temp dir, no dashboard and no
usage stats, a custom resource naming its VM, and the VM's CPU and GPU counts.

The driver runs where the paper's ran, on VM1 (a Ray driver needs a local node): RayCluster.drive()
starts `python -m harness.emulation.ray_driver` inside VM1's namespace, hands it a request on
stdin and reads its answer from stdout.
"""
import json
import shutil
import sys
from pathlib import Path

from harness.emulation import netns
from harness.emulation.network import EmulatedNetwork

PORT = 6379
OBJECT_STORE_BYTES = 100 * 2**20  # Ray's minimum is 75 MiB; the suite moves no large objects


class RayCluster:
    def __init__(self, net: EmulatedNetwork):
        self.net = net
        self.ray = str(Path(sys.executable).with_name("ray"))
        self.temp = {vm: netns.scratch(name) for vm, name in net.netns.items()}  # removed with the namespace
        self.head = net.slice.vms[0].name
        self.address = f"{net.address[self.head]}:{PORT}"
        self.started: list[str] = []

    def __enter__(self) -> "RayCluster":
        try:
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
        argv = [self.ray, "start", *role, "--node-ip-address", self.net.address[vm.name],
                "--temp-dir", str(self.temp[vm.name]), "--disable-usage-stats",
                "--num-cpus", str(vm.cores or 1), "--num-gpus", "0" if self.net.cpu_only else str(vm.gpus),
                "--resources", json.dumps({vm.name: 1}), "--object-store-memory", str(OBJECT_STORE_BYTES)]
        self.started.append(vm.name)
        result = self.net.run(vm.name, argv, timeout=120, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"ray start on {vm.name} failed: {result.stderr.strip().splitlines()[-1]}")

    def stop(self) -> None:
        # Not `ray stop`: it finds Ray processes by name on the whole machine, so it would also
        # stop every other Ray cluster here (another slice's, the user's own). Only the process
        # trees started for this cluster's nodes are stopped, node by node.
        for vm in self.started:
            netns.stop(self.net.netns[vm], marker=str(self.temp[vm]))
        for vm in self.started:
            shutil.rmtree(self.temp[vm], ignore_errors=True)
        self.started = []

    def drive(self, request: dict, timeout: float = 900) -> dict:
        """Run the driver on VM1 with this request; returns its answer."""
        request = {**request, "address": self.address, "vms": [vm.name for vm in self.net.slice.vms],
                   "addresses": self.net.address}
        result = self.net.run(self.head, [sys.executable, "-m", "harness.emulation.ray_driver"], timeout=timeout,
                              input=json.dumps(request), capture_output=True, text=True)
        if result.returncode:
            tail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no output"
            raise RuntimeError(f"Ray driver failed: {tail}")
        return json.loads(result.stdout.strip().splitlines()[-1])
