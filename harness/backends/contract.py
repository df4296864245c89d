"""What a trial needs from the machines it runs on: the Cluster protocol.

harness.runs.trials.Runner keeps the books of a sweep (which trials ran, their steps, their records);
a Cluster does the work on the VMs. A group is a set of the slice's VMs that trains together (all
of them, or one alone); it is named by its VMs and opened on first use. Every group's processes
are worker servers (harness.backends.worker --serve), so the requests below are the same on every
cluster; what differs is how the processes are started and how the link between the VMs is made.

A new cluster implements this protocol, usually by subclassing ServedGroups, and registers a
backend for it (harness.suite.backends.register).
"""
from typing import Protocol

from harness.backends import protocol
from harness.platform.slices import Slice

VMs = tuple[str, ...]


class Failed(RuntimeError):
    """A request the workers answered with a failure: the trial's result (oom, the paper's x, or error)."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class GroupLost(Failed):
    """The group's workers died (a crash, a link down past the heartbeat) or stopped answering.
    The cluster has closed the group; its next use opens it again, with nothing built."""

    def __init__(self, reason: str):
        super().__init__("error", reason)


class Cluster(Protocol):
    devices_per_host: int
    tcp_buffer_bytes: int | None  # the VMs' TCP buffers where the cluster sets them; None: the kernel's
    compute_shares: dict  # slice -> VM -> its share of its cores (its GPU's speed); empty: full speed
    # True where the VMs' GPUs are shares of fewer physical ones: a group's processes keep the
    # memory their allocator took until they exit, so only one group may hold the GPUs at a time
    # (harness.backends.layout), and the runner releases the others before it uses one.
    one_group_at_a_time: bool

    def build(self, vms: VMs, key: str, job: dict, budget_steps: int) -> dict:
        """Compile job (harness.runs.jobs.Job.to_dict()) on the group's processes, kept under key:
        VM1's answer, {"compile_s", "description", "bytes_per_device"}. Raises Failed."""

    def steps(self, vms: VMs, key: str, n: int) -> dict:
        """n training steps of the step built under key: VM1's {"losses", "step_times_s"}, which
        process 0 times, as Alpa's driver did, and "peak_bytes": the most the fullest device of the
        group held at once since its processes started (None where devices keep no count). Raises
        Failed (GroupLost when the workers died)."""

    def held_out_loss(self, vms: VMs, key: str) -> float:
        """The loss of the model built under key, as trained so far, on its job's held-out blocks
        (harness.runs.jobs.Job.held_out). Raises Failed."""

    def restart(self, vms: VMs, key: str) -> None:
        """Put the step built under key back to its untrained model and optimizer state, its
        schedule and data at step 0, keeping what was compiled. Raises Failed."""

    def release(self, vms: VMs) -> None:
        """Stop the group's processes, and with them everything built on them; its next use opens
        it again with nothing built."""

    def rtt_ms(self, a: str, b: str) -> float:
        """The RTT between two VMs, measured now (the fastest of spaced probes, as ping's min)."""

    def use_slice(self, sl: Slice) -> None:
        """Give the VMs slice sl's links (and GPU speeds) from now on; a live cluster has its own."""

    def counters(self, vms: VMs) -> dict | None:
        """The link's packet counters summed over the directions between vms; None where the
        cluster cannot count them (a live slice, one VM)."""

    def facts(self, vms: VMs) -> dict:
        """What a trial's record says of the cluster beyond the trial's own figures: "network"
        (its mechanism and, where known, the link's rate and settings), and where they apply
        "compute_shares", "processes_per_host" and "gpu_sharing"."""

    def close(self) -> None:
        """Stop every process the cluster started."""


class ServedGroups:
    """The requests of the Cluster protocol as worker-server calls; a subclass opens, calls and
    closes groups (_open, _call, _close) and measures RTTs."""

    one_group_at_a_time = False

    def __init__(self, devices_per_host: int, step_timeout_s: float = 600):
        self.devices_per_host, self.step_timeout_s = devices_per_host, step_timeout_s
        self.groups: set[VMs] = set()

    def held_out_loss(self, vms: VMs, key: str) -> float:
        return self._first(vms, {"do": "eval", "key": key})["held_out_loss"]

    def restart(self, vms: VMs, key: str) -> None:
        self._first(vms, {"do": "restart", "key": key})

    def release(self, vms: VMs) -> None:
        if vms in self.groups:
            self.groups.discard(vms)
            self._close(vms)

    def build(self, vms: VMs, key: str, job: dict, budget_steps: int) -> dict:
        return self._first(vms, {"do": "build", "key": key, "job": job, "budget_steps": budget_steps})

    def steps(self, vms: VMs, key: str, n: int) -> dict:
        return self._first(vms, {"do": "steps", "key": key, "n": n})

    def _first(self, vms: VMs, request: dict) -> dict:
        if vms not in self.groups:
            self._open(vms)
            self.groups.add(vms)
        try:
            answers = self._call(vms, request, self.step_timeout_s)
        except GroupLost:
            self.groups.discard(vms)
            self._close(vms)
            raise
        problem = next(filter(None, map(protocol.problem, answers.values())), None)
        if problem:
            raise Failed(*problem)
        return protocol.fullest([answers[vm] for vm in vms])

    def close(self) -> None:
        for vms in list(self.groups):
            self.groups.discard(vms)
            self._close(vms)

    # -- what a subclass provides -------------------------------------------------------------
    def _open(self, vms: VMs) -> None:
        """Start the group's processes; GroupLost when they cannot be started."""
        raise NotImplementedError

    def _call(self, vms: VMs, request: dict, timeout_s: float) -> dict:
        """Every process of the group gets the request; the answers by VM. GroupLost when a
        process died or did not answer within timeout_s."""
        raise NotImplementedError

    def _close(self, vms: VMs) -> None:
        """Stop the group's processes; a group already dead closes without complaint."""
        raise NotImplementedError
