"""Stopping the process trees a run started, and nothing else on the machine.

A tree is rooted at a process whose command line mentions a marker (a VM's Ray temp dir, a live
VM's work dir); its descendants go with it, whatever they renamed themselves to (Ray's workers
call themselves `ray::...`). Used for emulated VMs (the processes of a namespace) and for live
VMs (the processes of a host that `live up` started).
"""
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def mentions(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def in_trees(candidates: Iterable[int], roots: set[int]) -> list[int]:
    """The candidates that are roots or descend from one."""
    chosen = []
    for p in candidates:
        q = p
        while q is not None and q > 1 and q not in roots:
            q = parent(q)
        if q in roots:
            chosen.append(p)
    return chosen


def ancestors(pid: int) -> set[int]:
    out = set()
    while pid is not None and pid > 1:
        out.add(pid)
        pid = parent(pid)
    return out


def kill(targets: Callable[[], list[int]], grace_s: float) -> None:
    """SIGTERM what targets() names, then after grace_s SIGKILL what it still names."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while targets() and time.monotonic() < deadline:
            time.sleep(0.05)
