"""Network namespaces of the suite: created with a project prefix, recorded with their owner, swept.

Every namespace is named `fh-<run>-<vm>` and recorded in /run/fabric-harness/<name>.pid with the
pid of the process that owns it. A namespace whose owner is gone is a leftover of a crash, and
sweep() removes it together with its processes, its /etc/netns/<name> files and its scratch dir.
"""
import functools
import os
import shutil
import socket
import subprocess
from pathlib import Path

from harness.backends import process_trees

PREFIX = "fh-"
RECORDS = Path("/run/fabric-harness")
ETC_NETNS = Path("/etc/netns")
# Linux's default congestion control, CUBIC, as on the paper's VMs unless they were tuned (it does
# not say). A namespace otherwise inherits the machine's, which may be BBR (this suite's machines):
# BBR keeps the smallest RTT it saw for 10 s, so after a live change of the link's RTT a
# connection's window stays sized for the old one and an all-reduce takes several times its round
# trips (`ss -ti` shows it).
CONGESTION_CONTROL = "cubic"


class Unavailable(RuntimeError):
    """The machine cannot emulate a slice (privilege or kernel feature missing); says which."""


@functools.cache  # privileges do not change while a process runs; the check creates a namespace
def missing_privileges() -> str | None:
    if os.geteuid() != 0:
        return "emulated slices need root (network namespaces and TUN devices), running as uid %d" % os.geteuid()
    if shutil.which("ip") is None:
        return "emulated slices need iproute2's `ip` command; it is not installed"
    probe = f"{PREFIX}probe-{os.getpid()}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode:
        return f"cannot create a network namespace: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if not has_tun() and not has_netem():
        return ("emulated slices need a kernel with sch_netem or /dev/net/tun (the userspace delay link's TUN "
                "devices); this machine has neither")
    return None


def has_tun() -> bool:
    return Path("/dev/net/tun").exists()


@functools.cache  # kernel features do not change while a process runs
def netem_missing() -> str | None:
    """Why the kernel's netem cannot delay this machine's links, or None where it can (many
    kernels, this suite's CI machines' among them, lack sch_netem)."""
    if shutil.which("tc") is None:
        return "iproute2's tc is not installed"
    probe = f"{PREFIX}netem-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        result = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                                 "delay", "1ms"], capture_output=True, text=True)
        said = result.stderr.strip().rstrip(".") or f"exit status {result.returncode}"
        return None if result.returncode == 0 else f"tc could not add a netem qdisc ({said})"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def has_netem() -> bool:
    return netem_missing() is None


def ip(*args: str, netns: str | None = None) -> str:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")
    return result.stdout


def create(name: str, address: str, tcp_buffer_bytes: int | None = None) -> str:
    """A namespace whose processes see the machine's hostname resolve to `address`, with TCP's
    CONGESTION_CONTROL where the kernel has it; returns the congestion control it runs.
    tcp_buffer_bytes: the most a socket buffers each way (tcp_rmem and tcp_wmem, per namespace),
    which caps a connection's window at half of it; None keeps the kernel's.

    gloo (jax.distributed's CPU collectives) binds to whatever the hostname resolves to; iproute2
    bind-mounts /etc/netns/<name>/hosts over /etc/hosts for processes started with
    `ip netns exec`, so each emulated VM resolves the hostname to its own address.
    """
    assert name.startswith(PREFIX)
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / f"{name}.pid").write_text(str(os.getpid()))
    ip("netns", "add", name)
    ip("link", "set", "lo", "up", netns=name)
    etc = ETC_NETNS / name
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n")
    allow_congestion_control(CONGESTION_CONTROL)
    setting = "/proc/sys/net/ipv4/tcp_congestion_control"  # per namespace: seen from inside it
    script = f"echo {CONGESTION_CONTROL} > {setting} 2>/dev/null; cat {setting}"
    if tcp_buffer_bytes is not None:
        # Autotuning grows a buffer up to the third value and never shrinks it: set before any
        # connection opens, so that it caps every one.
        values = f"4096 {min(16384, tcp_buffer_bytes)} {tcp_buffer_bytes}"
        script = (f"echo '{values}' > /proc/sys/net/ipv4/tcp_rmem && echo '{values}' > /proc/sys/net/ipv4/tcp_wmem && "
                  + script)
    return subprocess.run(["ip", "netns", "exec", name, "sh", "-c", script],
                          capture_output=True, text=True, check=True).stdout.strip()


def allow_congestion_control(algorithm: str) -> None:
    """A namespace may default to an algorithm only if the machine allows it to everyone
    (tcp_allowed_congestion_control, one list for all namespaces); adding one to the list lets
    unprivileged sockets choose it and changes nothing else."""
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    names = allowed.read_text().split()
    if algorithm not in names and algorithm in available.read_text().split():
        allowed.write_text(" ".join([*names, algorithm]))


def scratch(name: str) -> Path:
    """A directory for files of what runs in the namespace (Ray's temp dir); removed with it.

    Short on purpose: Ray puts unix sockets under it, whose paths must stay under 108 bytes.
    """
    return Path("/tmp") / name


def pids(name: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split()]


def stop(trees: dict[str, str | None], grace_s: float = 3) -> None:
    """SIGTERM, then after grace_s SIGKILL, processes in namespaces: {namespace: marker}, all of a
    namespace's processes where marker is None, else only the trees rooted at a process whose
    command line mentions marker (harness.backends.process_trees). All namespaces share one grace
    period: Ray's daemons let it pass (they take 10 s or more to honour SIGTERM), and a slice's
    nodes stopped one by one would wait it out once for each."""
    def targets() -> list[int]:
        chosen = []
        for name, marker in trees.items():
            inside = pids(name)
            roots = set(inside) if marker is None else {p for p in inside if process_trees.mentions(p, marker)}
            chosen += process_trees.in_trees(inside, roots)
        return chosen

    process_trees.kill(targets, grace_s)


def delete(name: str) -> None:
    """Kill everything still running inside, then remove the namespace and its files."""
    stop({name: None})
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
    shutil.rmtree(scratch(name), ignore_errors=True)
    (RECORDS / f"{name}.pid").unlink(missing_ok=True)


def ours() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def sweep() -> list[str]:
    """Remove the suite's namespaces whose owner process has died; returns their names."""
    removed = []
    for name in ours():
        record = RECORDS / f"{name}.pid"
        owner = int(record.read_text()) if record.exists() else None
        if owner is None or not _alive(owner):
            removed.append(name)
    stop({name: None for name in removed})  # one grace period for all of what a crash left running
    for name in removed:
        delete(name)
    return removed
