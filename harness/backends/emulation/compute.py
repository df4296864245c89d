"""The emulated VMs' GPUs at their relative speeds: a CPU quota per VM, as netem is a delay per link.

The paper's slices mix GPUs (2 RTX 6000 and 2 T4 on TACC-TACC and UTAH-GPN): a T4 computes at
half an RTX 6000's rate, and a step across both VMs waits for it. On CPU every emulated VM gets an
equal share of this machine's cores (harness.backends.ray_nodes.share_cores), so without more a
T4 VM would compute as fast as an RTX VM. Here each VM runs in a cgroup of its own whose CPU quota
is its cores times its GPU's speed against the fastest GPU of the run (`shares`): the data
sheets' peaks at the paper's stated precision, the ratio the cost model gives the paper's GPUs.
The fastest VMs are not limited at all. One cluster serves every slice of a run, so `use_slice`
sets the quotas again where a slice has other GPUs on the same VM names.

The quota takes only CPU time the VM computes with: a VM waiting for the network uses none, so
its messages are not held back while it waits, as a slower GPU would not hold them. Over a
PERIOD_US the VM runs for its share and then waits: a pause of at most PERIOD_US x (1 - share),
short against the scale model's steps (tenths of a second and more).

Each cgroup is named after its VM's network namespace (netns.PREFIX...), so `sweep` finds those a
crash left once their namespace is gone. cgroup v1's cpu controller and cgroup v2's are both
used where mounted; a machine with neither cannot emulate a mixed slice (`missing`), one whose
VMs all have one GPU needs no quota at all.
"""
import time
from pathlib import Path

from harness.backends.emulation import netns
from harness.core.config import Setup
from harness.platform.slices import Slice

PERIOD_US = 10_000  # CFS's bandwidth period; the kernel allows 1 ms to 1 s
MOUNTS = Path("/proc/self/mounts")
RMDIR_TRIES = 50  # a cgroup whose last process is exiting cannot be removed for a few milliseconds


def shares(slices: list[Slice], precision: str = Setup().precision) -> dict[str, dict[str, float]]:
    """{slice: {vm: its GPU's peak at `precision` over the fastest GPU of all the slices}}: one
    reference for the whole run, so that a VM of one GPU computes alike on every slice."""
    peak = lambda vm: vm.accelerator.peak_tflops(precision)
    fastest = max(peak(vm) for sl in slices for vm in sl.vms)
    return {sl.name: {vm.name: peak(vm) / fastest for vm in sl.vms} for sl in slices}


def limited(run_shares: dict[str, dict[str, float]]) -> bool:
    """Whether some VM of shares() computes at less than full speed: a quota is needed."""
    return any(s < 1.0 for by_vm in run_shares.values() for s in by_vm.values())


def _controller() -> tuple[Path, int] | None:
    """(the cpu controller's mount, cgroup version) on this machine, or None."""
    for line in MOUNTS.read_text().splitlines():
        _, where, kind, options, *_ = line.split()
        if kind == "cgroup" and "cpu" in options.split(","):
            return Path(where), 1
        if kind == "cgroup2" and all("cpu" in _words(Path(where) / f) for f in ("cgroup.controllers",
                                                                                 "cgroup.subtree_control")):
            return Path(where), 2
    return None


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def missing() -> str | None:
    """Why this machine cannot give an emulated VM a CPU quota, or None where it can."""
    found = _controller()
    if found is None:
        return ("emulating a slice of mixed GPUs needs a cgroup cpu controller (v1, or v2 with cpu in the root's "
                f"cgroup.subtree_control); {MOUNTS} shows none")
    root, _ = found
    probe = root / f"{netns.PREFIX}probe-quota"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as e:
        return f"cannot create a cgroup under {root}: {e}"
    return None


class VMQuotas:
    """One cgroup per emulated VM, its quota set from the slice in use; a context manager that
    removes them all on exit. vm_netns: {vm: its namespace's name}; cores: {vm: how many it is
    pinned to}; run_shares: shares() of the run's slices."""

    def __init__(self, vm_netns: dict[str, str], cores: dict[str, int], run_shares: dict[str, dict[str, float]]):
        self.cores, self.run_shares = cores, run_shares
        self.limited = limited(run_shares)
        self.slice: str | None = None
        found = _controller() if self.limited else None
        if self.limited and found is None:
            raise netns.Unavailable(missing())
        self.root, self.version = found or (None, None)
        self.groups = {vm: self.root / name for vm, name in vm_netns.items()} if self.limited else {}

    def __enter__(self) -> "VMQuotas":
        sweep()
        try:
            for group in self.groups.values():
                group.mkdir()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def use_slice(self, name: str) -> None:
        """The quotas of slice `name`'s GPUs, from now on (processes keep running)."""
        for vm, group in self.groups.items():
            share = self.run_shares[name][vm]
            quota = -1 if share >= 1.0 else max(1000, round(PERIOD_US * self.cores[vm] * share))
            if self.version == 1:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (group / "cpu.max").write_text(f"{'max' if quota < 0 else quota} {PERIOD_US}")
        self.slice = name

    def shares_of(self, vms: list[str]) -> dict[str, float] | None:
        """The share of its cores each of vms computes with now (None: no VM is limited)."""
        return {vm: self.run_shares[self.slice][vm] for vm in vms} if self.limited and self.slice else None

    def enter(self, vm: str) -> list[str]:
        """A command prefix that runs a command inside vm's cgroup (it and all it starts); it goes
        before `ip netns exec`, whose /sys has no cgroups."""
        if vm not in self.groups:
            return []
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.groups[vm] / "cgroup.procs")]

    def close(self) -> None:
        for group in self.groups.values():
            _remove(group)


def _remove(group: Path) -> None:
    for _ in range(RMDIR_TRIES):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: its processes are still exiting
            time.sleep(0.01)
    group.rmdir()  # still busy: say so


def ours() -> set[str]:
    """The suite's cgroups on this machine, by name."""
    found = _controller()
    return {g.name for g in found[0].glob(f"{netns.PREFIX}*") if g.is_dir()} if found else set()


def sweep() -> list[str]:
    """Remove the suite's cgroups whose namespace is gone (what a crash left); returns their names."""
    found = _controller()
    if found is None:
        return []
    alive = set(netns.ours())
    removed = []
    for group in (found[0] / name for name in ours()):
        if group.name not in alive:
            for pid in (group / "cgroup.procs").read_text().split():
                (found[0] / "cgroup.procs").write_text(pid)  # a survivor goes back to the root
            _remove(group)
            removed.append(group.name)
    return removed
