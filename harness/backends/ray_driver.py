"""The Ray driver of an emulated or live slice, run on VM1: `python -m harness.backends.ray_driver`.

It reads requests on stdin, one JSON object per line, and answers each with one JSON line:
    {"do": "nodes"}                       -> the alive nodes: address and resources
    {"do": "where"}                       -> for each VM, the address its pinned actor sees
    {"do": "rtt", "a": vm, "b": vm}       -> RTT in ms between two VMs, measured by their actors: the
                                             lowest of probe.PROBES spaced probes, as ping's min (busy
                                             or idle VMs add wake-up delays to single probes here)
    {"do": "train", "jobs": [...], "devices_per_host": d, "heartbeat_s": 30}
                                          -> per VM, the results of harness.backends.worker running the jobs
    {"do": "open", "group": g, "vms": [...], "devices_per_host": d}
                                          -> a worker server (harness.backends.worker --serve) per VM, kept
"train" and "open" may carry "layout": {vm: [process, ...]} (harness.backends.layout): the worker
processes of each VM, their devices and environments, in place of one process per VM.
    {"do": "call", "group": g, "request": {...}, "timeout": s}
                                          -> per VM, that server's answer to the request
    {"do": "close", "group": g}
Every request may carry "vms" (default: all). A request that fails answers with the error shape
of harness.backends.protocol.
Training workers are Ray actors pinned one per VM (placement group, STRICT_SPREAD, and the VM's
custom resource); each starts `python -m harness.backends.worker`, which brings up jax.distributed with
VM1's actor as coordinator, exactly as the local launcher does.
"""
import ctypes
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.backends import protocol
from harness.backends.emulation import probe
from harness.backends.layout import Process
from harness.backends.servers import WorkerServer, describe_failure
from harness.backends.worker import HEARTBEAT_S, environment

COORDINATOR_PORT = 7310
ECHO_PORT = 7311
PIN = 0.01
PLACE_S = 120  # an actor per VM is placed in seconds when the resources are there
HEAD_PROBE_S = 10  # a head across a WAN answers in well under a second


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphaned workers


# No CPU of Ray's: the actor only starts processes, which taskset pins to the VM's cores, and a
# VM of one core (a slice file that gives none) must still host a worker group and an RTT probe.
@ray.remote(num_cpus=0)
class VMWorker:
    """A VM's pinned actor; it starts the VM's worker processes (one, or one per shared GPU)."""

    def __init__(self):
        self.servers: list[WorkerServer] = []

    def address(self) -> str:
        return ray.util.get_node_ip_address()  # the VM's address as its Ray node was started with

    def train(self, jobs: list, envs: list[dict], timeout: float) -> list:
        """Every process of the VM runs the jobs; the first one's results come back."""
        procs = []
        try:
            for env in envs:
                out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
                procs.append((subprocess.Popen([sys.executable, "-m", "harness.backends.worker"], text=True,
                                               stdin=subprocess.PIPE, stdout=out, stderr=err,
                                               env={**os.environ, **env}, preexec_fn=_die_with_parent), out, err))
            for proc, _, _ in procs:  # each gets its jobs before any waits for the others
                proc.stdin.write(json.dumps(jobs))
                proc.stdin.close()
            for proc, _, _ in procs:
                proc.wait(timeout=timeout)
            results = []
            for (proc, out, err), env in zip(procs, envs):
                out.seek(0), err.seek(0)
                if proc.returncode:
                    raise RuntimeError(f"the worker on {self.address()} "
                                       f"{describe_failure(proc.returncode, err.read(), env)}")
                results.append(json.loads(out.read().strip().splitlines()[-1]))
            return results[0]
        finally:
            for proc, out, err in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                out.close(), err.close()

    # The probes run as processes of their own, as `harness emulate` runs them: in a thread of the
    # actor they would share its interpreter with Ray's threads and read high by their scheduling.
    def echo(self) -> None:
        self.echo_server = subprocess.Popen([sys.executable, "-m", "harness.backends.emulation.probe", "echo", self.address(),
                                             str(ECHO_PORT)], stdout=subprocess.PIPE, text=True,
                                            preexec_fn=_die_with_parent)
        if self.echo_server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the echo probe did not start on {self.address()}")

    def ping(self, address: str, count: int) -> list[float]:
        out = subprocess.run([sys.executable, "-m", "harness.backends.emulation.probe", "ping", address, str(ECHO_PORT),
                              str(count)], capture_output=True, text=True, check=True, timeout=120)
        return json.loads(out.stdout)["rtt_ms"]

    def open(self, envs: list[dict]) -> None:
        self.servers += [WorkerServer({**os.environ, **env}, self.address(), _die_with_parent) for env in envs]

    def send(self, request: dict) -> None:
        for server in self.servers:
            server.send(request)

    def answer(self, timeout: float) -> dict:
        """The VM's answer: its first process's, unless another of its processes failed, with the
        allocator's peak of its fullest process."""
        try:
            answers = [server.answer(timeout) for server in self.servers]
        except TimeoutError:
            self.close()
            raise
        failed = next((a for a in answers if protocol.problem(a)), None)
        return failed or protocol.fullest(answers)

    def close(self) -> None:
        for server in self.servers:
            server.kill()
        self.servers = []


def envs_for(request: dict, coordinator: str, vms: list[str], port: int = COORDINATOR_PORT) -> list[list[dict]]:
    """Each VM's processes' environments: the request's layout (harness.backends.layout), or one
    process per VM with devices_per_host devices; process ids run VM by VM."""
    given = request.get("layout")
    per_vm = ([[Process.from_dict(p) for p in given[vm]] for vm in vms] if given
              else [[Process(request["devices_per_host"])] for _ in vms])
    ids = itertools.count()
    total = sum(map(len, per_vm))
    return [[{**environment(f"{coordinator}:{port}", total, next(ids), p.devices, request.get("platform", "cpu"),
                            request.get("heartbeat_s", HEARTBEAT_S)), **p.env} for p in procs] for procs in per_vm]


class DriverServer:
    def __init__(self):
        self.groups: dict[str, tuple] = {}  # name -> (placement group, vms, actors)
        self.opened = 0  # each multi-VM group gets its own coordinator port

    def pinned(self, vms: list[str], gpus: int = 0):
        # A sliver of the VM's own resource (each node has 1): it pins the actor to the VM and
        # leaves room for the other actors placed there (a single-VM group next to a two-VM one).
        # With GPUs, the actor holds the VM's GPUs, and Ray sets CUDA_VISIBLE_DEVICES for its worker.
        extra = {"GPU": gpus} if gpus else {}
        bundles = [{vm: PIN, **extra} for vm in vms]
        group = placement_group(bundles, strategy="STRICT_SPREAD")
        try:
            ray.get(group.ready(), timeout=PLACE_S)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise RuntimeError(f"Ray could not place an actor on each of {', '.join(vms)} within {PLACE_S} s: "
                               f"each needs {PIN} of its VM's resource{f' and {gpus} GPUs' if gpus else ''}, "
                               f"free now {ray.available_resources()}") from None
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
        # A live slice's VM gets its GPUs from Ray; an emulated one's processes are told theirs.
        held = do in ("open", "train") and request.get("platform") == "gpu" and not request.get("layout")
        gpus = request["devices_per_host"] if held else 0
        group, actors = self.pinned(vms, gpus)
        addresses = ray.get([a.address.remote() for a in actors])
        if do == "open":
            self.opened += 1
            port = COORDINATOR_PORT + self.opened
            envs = envs_for(request, addresses[0], vms, port)
            ray.get([a.open.remote(e) for a, e in zip(actors, envs)])
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
                envs = envs_for(request, addresses[0], vms)
                return dict(zip(vms, ray.get([a.train.remote(request["jobs"], e, request.get("timeout", 900))
                                              for a, e in zip(actors, envs)])))
            raise ValueError(f"unknown request {do!r}")
        finally:
            for a in actors:
                ray.kill(a)
            remove_placement_group(group)

    def close(self) -> None:
        for name in list(self.groups):
            self.handle({"do": "close", "group": name})


def join(address: str) -> None:
    """ray.init, failing with the reason: Ray's own error says only that it could not connect
    (before 2.60, not even that), and the cause, such as a missing or wrong token, is inside the
    text of an exception it chained. Where nothing listens, or something that is not a Ray head,
    ray.init retries for minutes (past five on 2.60), so the head's port is tried first."""
    host, _, port = address.rpartition(":")
    problem = probe_head(host, int(port))
    if problem:
        raise ConnectionError(f"cannot join the Ray cluster at {address}: {problem}")
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:
        raise ConnectionError(f"cannot join the Ray cluster at {address}: {root_cause(e)}") from e


# A client's HTTP/2 connection preface, then an empty SETTINGS frame (length 0, type 4, no flags,
# stream 0). Any HTTP/2 server, and so the gRPC server of Ray's GCS, answers with a SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4
NOT_A_HEAD = f"something listens there, but not a Ray head: no gRPC answer in {HEAD_PROBE_S} s"


def probe_head(host: str, port: int) -> str | None:
    """Why no Ray head can be at host:port, or None where one may be. Beside a closed port, this
    finds an open one that does not speak gRPC (a Redis, an SSH, a dashboard's HTTP port), where
    ray.init would wait for minutes. A head with TLS (RAY_USE_TLS) is only tried for its port."""
    try:
        conn = socket.create_connection((host, port), timeout=HEAD_PROBE_S)
    except OSError as e:
        return f"no Ray head answers there ({type(e).__name__}: {e.strerror or e})"
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return None
        try:
            conn.sendall(HTTP2_PREFACE)
            header = conn.recv(9, socket.MSG_WAITALL)  # a frame's header; fewer bytes if it closes
        except OSError as e:
            return f"{NOT_A_HEAD} ({type(e).__name__}: {e.strerror or e})"
    if len(header) == 9 and header[3] == HTTP2_SETTINGS:
        return None
    return f"{NOT_A_HEAD} ({'it answered, but not in HTTP/2' if header else 'it closed the connection'})"


def root_cause(exc: BaseException) -> str:
    """'Name: first sentence' of the innermost error in an exception's chain, or named in its text
    (a chained traceback, formatted into a message, ends with a 'module.NameError: ...' line)."""
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    for e in reversed(chain):
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        if not lines:
            continue
        named = [line for line in lines if re.match(r"[\w.]*(Error|Exception): ", line)]
        name, _, message = (named[-1] if named else f"{type(e).__name__}: {lines[0]}").partition(": ")
        return f"{name.rsplit('.', 1)[-1]}: {message.split('. ')[0]}"
    return type(chain[0]).__name__


def main() -> None:
    driver = None
    for line in sys.stdin:
        request = json.loads(line)
        if driver is None:
            join(request["address"])
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
