"""This side of a Ray driver: starts `python -m harness.backends.ray_driver` (inside VM1's
namespace on an emulated slice, on this machine on a live one) and sends it one JSON request per
line, reading one JSON answer per line."""
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile

from harness.backends import protocol


class DriverError(RuntimeError):
    pass


class DriverClient:
    """A running Ray driver process (harness.backends.ray_driver), spoken to one JSON line at a time.

    On an emulated slice it runs inside VM1's namespace; on a live slice, on this machine (which
    must be a node of the cluster: a Ray driver needs a local node)."""

    def __init__(self, prefix: list[str], address: str, vms: list[str], env: dict | None = None,
                 command: list[str] | None = None):
        """prefix: what runs the driver where it must run (a namespace, SSH); command: the driver
        itself, this interpreter's by default."""
        self.address, self.vms = address, vms
        self.log = tempfile.TemporaryFile("w+")
        command = command or [sys.executable, "-m", "harness.backends.ray_driver"]
        self.proc = subprocess.Popen([*prefix, *command], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, start_new_session=True)

    def __enter__(self) -> "DriverClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, request: dict, timeout: float = 900):
        self.proc.stdin.write(json.dumps({**request, "address": self.address, "all_vms": self.vms}) + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.log.seek(0)
            tail = self.log.read().strip().splitlines()
            self.close()
            why = f"no answer within {timeout:.0f} s" if not ready else (tail[-1] if tail else "it exited")
            raise DriverError(f"Ray driver failed on {request['do']!r}: {why}")
        answer = json.loads(line)
        problem = protocol.problem(answer)
        if problem:
            raise DriverError(f"Ray driver: {request['do']!r} failed: {problem[1]}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the driver closes its worker groups and disconnects
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
