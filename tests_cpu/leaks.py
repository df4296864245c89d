"""What the suite may have started, for the tests that check it is all stopped again."""
import contextlib
import signal
import subprocess
import time
from pathlib import Path

from harness.backends.emulation import compute, netns


def command_lines() -> list[str]:
    """The whole command line of every live (not zombie) process. `-ww`: without it, ps cuts each
    line at 80 columns when its output is not a terminal (as under pytest), and a checkout whose
    path is long enough pushes "raylet" or a module's name past the cut."""
    ps = subprocess.run(["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True, check=True).stdout
    return [line.split(None, 1)[1] for line in ps.splitlines() if not line.startswith("Z") and len(line.split(None, 1)) > 1]


def leftovers() -> dict:
    """Project namespaces, their scratch dirs and CPU quotas, relays, Ray daemons, Ray drivers and worker processes."""
    live = command_lines()
    count = lambda word: sum(word in p for p in live)
    return {"namespaces": set(netns.ours()), "scratch": {p.name for p in Path("/tmp").glob(f"{netns.PREFIX}*")},
            "cgroups": compute.ours(),
            "relays": count("harness.backends.emulation.delaylink"), "raylets": count("raylet"),
            "gcs": count("gcs_server"), "drivers": count("harness.backends.ray_driver"),
            "workers": count("harness.backends.worker")}


def back_to(before: dict, timeout: float = 60) -> dict:
    """Wait (bounded) until what is running is what ran before; returns what is running."""
    deadline = time.monotonic() + timeout
    while (now := leftovers()) != before and time.monotonic() < deadline:
        time.sleep(0.5)
    return now


def wait_until(condition, timeout: float, what: str) -> None:
    """Poll condition() until it holds; fail naming `what` after `timeout` seconds. Processes a
    slice starts show up in `ps` a moment after the slice says it is up, later still on a busy
    machine: a count is waited for, not read once."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout:.0f} s ({leftovers()})"
        time.sleep(0.5)


@contextlib.contextmanager
def stopped_at_exit(proc: subprocess.Popen, grace_s: float = 180):
    """The child `proc` (a slice, a reproduce run) is stopped when the block ends, also when an
    assertion in it failed: Ctrl-C first, as a user would, so that it tears its slice down; then,
    if it has not ended within grace_s, SIGKILL and the start-up sweep for what it left."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                netns.sweep()


def interruptible() -> None:
    """preexec_fn for a child the test will Ctrl-C: a test run started in the background
    (`cmd &` from a script, nohup) ignores SIGINT and its children inherit that; give the child a
    terminal's Ctrl-C back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
