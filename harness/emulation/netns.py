"""Network namespaces of the suite: created with a project prefix, recorded with their owner, swept.

Every namespace is named `fh-<run>-<vm>` and recorded in /run/fabric-harness/<name>.pid with the
pid of the process that owns it. A namespace whose owner is gone is a leftover of a crash, and
sweep() removes it together with its processes and its /etc/netns/<name> files.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PREFIX = "fh-"
RECORDS = Path("/run/fabric-harness")
ETC_NETNS = Path("/etc/netns")


class Unavailable(RuntimeError):
    """The machine cannot emulate a slice (privilege or kernel feature missing); says which."""


def missing_privileges() -> str | None:
    if os.geteuid() != 0:
        return "emulated slices need root (network namespaces and TUN devices), running as uid %d" % os.geteuid()
    if not Path("/dev/net/tun").exists():
        return "emulated slices need /dev/net/tun (the userspace delay link's TUN devices); it is missing"
    if shutil.which("ip") is None:
        return "emulated slices need iproute2's `ip` command; it is not installed"
    probe = f"{PREFIX}probe-{os.getpid()}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode:
        return f"cannot create a network namespace: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def has_netem() -> bool:
    """Whether the kernel has sch_netem (many, including this suite's CI machines, do not)."""
    probe = f"{PREFIX}netem-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode:
        return False
    try:
        result = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                                 "delay", "1ms"], capture_output=True, text=True)
        return result.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def ip(*args: str, netns: str | None = None) -> str:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")
    return result.stdout


def create(name: str, address: str) -> None:
    """A namespace whose processes see the machine's hostname resolve to `address`.

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


def pids(name: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in result.stdout.split()]


def delete(name: str) -> None:
    """Kill everything still running inside, then remove the namespace and its files."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids(name):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while pids(name) and time.monotonic() < deadline:
            time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
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
            delete(name)
            removed.append(name)
    return removed
