"""Starting one process per VM on this machine. The techniques only need jax.distributed to be up in each.

LocalProcesses runs the processes over loopback, each with a list of jobs: the reference
multi-process setup. LocalCluster keeps them as worker servers: the Cluster protocol
(harness.backends.contract) with no Ray, no namespaces and no delay, so that the claims' trial path
runs as any user can. The emulated and live slices start the same worker through Ray
(harness.backends.ray_driver); anything that can start `python -m harness.backends.worker` with its
environment and read its stdout is a launcher.
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from harness.backends.contract import Failed, GroupLost, ServedGroups, VMs
from harness.backends.emulation import probe
from harness.backends.servers import WorkerServer, describe_failure
from harness.backends.worker import environment, inherited
from harness.platform.slices import Slice


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WorkerFailed(RuntimeError):
    pass


@dataclass
class LocalProcesses:
    hosts: int
    devices_per_host: int
    timeout_s: float = 600

    def run(self, jobs: list[dict]) -> list[list[dict]]:
        """Run jobs on every process; returns each process's results, by process index."""
        address = f"127.0.0.1:{free_port()}"
        procs, logs, envs = [], [], []
        try:
            for i in range(self.hosts):
                env = {**inherited(os.environ), **environment(address, self.hosts, i, self.devices_per_host,
                                                              os.environ.get("JAX_PLATFORMS", "cpu"))}
                envs.append(env)
                # Output goes to files, not pipes: a chatty worker must never block on a full pipe.
                out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
                logs.append((out, err))
                procs.append(subprocess.Popen([sys.executable, "-m", "harness.backends.worker"], env=env, text=True,
                                              stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True))
            for p in procs:  # every worker gets its jobs before any waits for the others
                p.stdin.write(json.dumps(jobs))
                p.stdin.close()
            for p in procs:
                p.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(f"workers did not finish within {self.timeout_s:.0f} s") from None
        finally:
            for p in procs:  # on success they have exited; on any failure or Ctrl-C none is left behind
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        results = []
        for i, (p, (out, err), env) in enumerate(zip(procs, logs, envs)):
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
            out.close(), err.close()
            if p.returncode != 0:
                raise WorkerFailed(f"worker {i} {describe_failure(p.returncode, stderr, env)}")
            results.append(json.loads(stdout.strip().splitlines()[-1]))
        return results


LOOPBACK = "loopback"  # the records' network mechanism: no link is emulated


class LocalCluster(ServedGroups):
    """A slice's VMs as processes of this machine over loopback: a group is one worker server per VM."""
    tcp_buffer_bytes = None
    compute_shares: dict = {}

    def __init__(self, devices_per_host: int, platform: str = "cpu", step_timeout_s: float = 600):
        super().__init__(devices_per_host, step_timeout_s)
        self.platform = platform
        self.servers: dict[VMs, list[WorkerServer]] = {}

    def _open(self, vms: VMs) -> None:
        address = f"127.0.0.1:{free_port()}"
        servers = self.servers[vms] = []
        for i, vm in enumerate(vms):
            env = {**inherited(os.environ), **environment(address, len(vms), i, self.devices_per_host, self.platform)}
            servers.append(WorkerServer(env, vm))

    def _call(self, vms: VMs, request: dict, timeout_s: float) -> dict:
        servers = self.servers[vms]
        try:
            for server in servers:  # every process gets the request before any waits for the others
                server.send(request)
            return {vm: server.answer(timeout_s) for vm, server in zip(vms, servers)}
        except (OSError, RuntimeError, TimeoutError) as e:
            raise GroupLost(str(e)) from None

    def _close(self, vms: VMs) -> None:
        for server in self.servers.pop(vms, []):
            server.kill()

    def rtt_ms(self, a: str, b: str) -> float:
        """Loopback's RTT, by the same UDP probes as an emulated link's (every VM is this machine)."""
        port = free_port()
        echo = subprocess.Popen([sys.executable, "-m", "harness.backends.emulation.probe", "echo", "127.0.0.1", str(port)],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            if echo.stdout.readline().strip() != "ready":
                raise Failed("error", "the loopback echo probe did not start")
            return probe.min_rtt_ms(probe.ping("127.0.0.1", port, probe.PROBES)[0])
        finally:
            echo.kill()
            echo.wait()
            echo.stdout.close()

    def use_slice(self, sl: Slice) -> None:
        pass  # loopback is loopback: the slice gives the VMs' names and GPUs, not their link

    def counters(self, vms: VMs) -> dict | None:
        return None

    def facts(self, vms: VMs) -> dict:
        return {"network": {"mechanism": LOOPBACK}}


@contextlib.contextmanager
def local(sl: Slice, platform: str = "cpu"):
    cluster = LocalCluster(sl.gpus_per_vm, platform)
    try:
        yield cluster
    finally:
        cluster.close()
