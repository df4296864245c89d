"""The Ray driver of an emulated or live slice, run on VM1: `python -m harness.cluster.ray_driver`.

It reads requests on stdin, one JSON object per line, and answers each with one JSON line:
    {"do": "nodes"}                       -> the alive nodes: address and resources
    {"do": "where"}                       -> for each VM, the address its pinned actor sees
    {"do": "rtt", "a": vm, "b": vm}       -> RTT in ms between two VMs, measured by their actors: the
                                             lowest of probe.PROBES spaced probes, as ping's min (busy
                                             or idle VMs add wake-up delays to single probes here)
    {"do": "train", "jobs": [...], "devices_per_host": d, "heartbeat_s": 30}
                                          -> per VM, the results of harness.cluster.worker running the jobs
    {"do": "open", "group": g, "vms": [...], "devices_per_host": d}
                                          -> a worker server (harness.cluster.worker --serve) per VM, kept
    {"do": "call", "group": g, "request": {...}, "timeout": s}
                                          -> per VM, that server's answer to the request
    {"do": "close", "group": g}
Every request may carry "vms" (default: all). A request that fails answers with the error shape
of harness.cluster.protocol.
Training workers are Ray actors pinned one per VM (placement group, STRICT_SPREAD, and the VM's
custom resource); each starts `python -m harness.cluster.worker`, which brings up jax.distributed with
VM1's actor as coordinator, exactly as the local launcher does.
"""
import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.cluster import protocol
from harness.cluster.local import describe_failure
from harness.cluster.worker import environment
from harness.emulation import probe

COORDINATOR_PORT = 7310
ECHO_PORT = 7311
PIN = 0.01


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphaned workers


@ray.remote(num_cpus=1)
class VMWorker:
    def __init__(self):
        self.server: subprocess.Popen | None = None

    def address(self) -> str:
        return ray.util.get_node_ip_address()  # the VM's address as its Ray node was started with

    def train(self, jobs: list, env: dict, timeout: float) -> list:
        result = subprocess.run([sys.executable, "-m", "harness.cluster.worker"], input=json.dumps(jobs), text=True,
                                capture_output=True, env={**os.environ, **env}, timeout=timeout,
                                preexec_fn=_die_with_parent)
        if result.returncode:
            raise RuntimeError(f"the worker on {self.address()} {describe_failure(result.returncode, result.stderr)}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    # The probes run as processes of their own, as `harness emulate` runs them: in a thread of the
    # actor they would share its interpreter with Ray's threads and read ~0.5 ms high.
    def echo(self) -> None:
        self.echo_server = subprocess.Popen([sys.executable, "-m", "harness.emulation.probe", "echo", self.address(),
                                             str(ECHO_PORT)], stdout=subprocess.PIPE, text=True,
                                            preexec_fn=_die_with_parent)
        if self.echo_server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the echo probe did not start on {self.address()}")

    def ping(self, address: str, count: int) -> list[float]:
        out = subprocess.run([sys.executable, "-m", "harness.emulation.probe", "ping", address, str(ECHO_PORT),
                              str(count)], capture_output=True, text=True, check=True, timeout=120)
        return json.loads(out.stdout)["rtt_ms"]

    def open(self, env: dict) -> None:
        self.log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty worker never blocks
        self.server = subprocess.Popen([sys.executable, "-m", "harness.cluster.worker", "--serve"], text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                       env={**os.environ, **env}, preexec_fn=_die_with_parent)

    def send(self, request: dict) -> None:
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()

    def answer(self, timeout: float) -> dict:
        with selectors.DefaultSelector() as sel:
            sel.register(self.server.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                self.close()
                raise TimeoutError(f"the worker on {self.address()} did not answer within {timeout:.0f} s")
        line = self.server.stdout.readline()
        if not line:
            self.server.wait()
            self.log.seek(0)
            raise RuntimeError(f"the worker on {self.address()} "
                               f"{describe_failure(self.server.returncode, self.log.read())}")
        return json.loads(line)

    def close(self) -> None:
        if self.server and self.server.poll() is None:
            self.server.kill()
            self.server.wait()


def env_for(request: dict, coordinator: str, vms: list[str], i: int, port: int = COORDINATOR_PORT) -> dict:
    return environment(f"{coordinator}:{port}", len(vms), i, request["devices_per_host"],
                       request.get("platform", "cpu"), request.get("heartbeat_s", 30), host=vms[i])


class DriverServer:
    def __init__(self):
        self.groups: dict[str, tuple] = {}  # name -> (placement group, vms, actors)
        self.opened = 0  # each multi-VM group gets its own coordinator port

    def pinned(self, vms: list[str], gpus: int = 0):
        # A sliver of the VM's own resource (each node has 1): it pins the actor to the VM and
        # leaves room for the other actors placed there (a single-VM group next to a two-VM one).
        # With GPUs, the actor holds the VM's GPUs, and Ray sets CUDA_VISIBLE_DEVICES for its worker.
        extra = {"GPU": gpus} if gpus else {}
        group = placement_group([{"CPU": 1, vm: PIN, **extra} for vm in vms], strategy="STRICT_SPREAD")
        ray.get(group.ready(), timeout=120)
        actors = [VMWorker.options(resources={vm: PIN}, num_gpus=gpus, scheduling_strategy=PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=i)).remote() for i, vm in enumerate(vms)]
        return group, actors

    def handle(self, request: dict):
        do = request["do"]
        if do == "nodes":
            return [{"address": n["NodeManagerAddress"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
        if do == "call":
            _, vms, actors = self.groups[request["group"]]
            for a in actors:  # every process gets the request before any waits for the others
                ray.get(a.send.remote(request["request"]))
            return dict(zip(vms, ray.get([a.answer.remote(request.get("timeout", 900)) for a in actors])))
        if do == "close":
            group, _, actors = self.groups.pop(request["group"])
            ray.get([a.close.remote() for a in actors])
            remove_placement_group(group)
            return {}
        vms = request.get("vms") or request["all_vms"]
        if do == "rtt":
            vms = [request["a"], request["b"]]
        gpus = request["devices_per_host"] if do in ("open", "train") and request.get("platform") == "gpu" else 0
        group, actors = self.pinned(vms, gpus)
        addresses = ray.get([a.address.remote() for a in actors])
        if do == "open":
            self.opened += 1
            port = COORDINATOR_PORT + self.opened
            ray.get([a.open.remote(env_for(request, addresses[0], vms, i, port)) for i, a in enumerate(actors)])
            self.groups[request["group"]] = (group, vms, actors)
            return {}
        try:
            if do == "where":
                return dict(zip(vms, addresses))
            if do == "rtt":
                ray.get(actors[1].echo.remote())
                rtts = ray.get(actors[0].ping.remote(addresses[1], request.get("count", probe.PROBES)))
                return probe.min_rtt_ms(rtts)
            if do == "train":
                return dict(zip(vms, ray.get([a.train.remote(request["jobs"], env_for(request, addresses[0], vms, i),
                                                             request.get("timeout", 900))
                                              for i, a in enumerate(actors)])))
            raise ValueError(f"unknown request {do!r}")
        finally:
            for a in actors:
                ray.kill(a)
            remove_placement_group(group)

    def close(self) -> None:
        for name in list(self.groups):
            self.handle({"do": "close", "group": name})


def main() -> None:
    driver = None
    for line in sys.stdin:
        request = json.loads(line)
        if driver is None:
            ray.init(address=request["address"], logging_level="ERROR", log_to_driver=False)
            driver = DriverServer()
        try:
            answer = driver.handle(request)
        except Exception as e:  # the caller decides what a failed request means
            answer = protocol.error(e)
        print(json.dumps(answer), flush=True)
    if driver is not None:
        driver.close()
        ray.shutdown()


if __name__ == "__main__":
    main()
