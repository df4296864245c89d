"""Starting one process per VM on this machine. The techniques only need jax.distributed to be up in each.

LocalProcesses runs the processes over loopback: the reference multi-process setup, and what CI
uses. The emulated and live slices start the same worker through Ray (harness.cluster.ray_driver);
anything that can start `python -m harness.cluster.worker` with its environment and read its
stdout is a launcher.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from harness.cluster.worker import environment, heartbeat_of


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WorkerFailed(RuntimeError):
    pass


LOST_CONTACT = "JAX distributed service detected fatal errors"


def describe_failure(returncode: int, stderr: str, env: dict[str, str]) -> str:
    """One line on why a worker died, from its exit status and the informative line of its stderr
    (`env`: the worker's environment, which holds its heartbeat timeout)."""
    how = f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited with {returncode}"
    lines = [line.strip() for line in stderr.splitlines()
             if line.strip() and not line.strip().startswith(("@", "***"))]  # not the abort's stack dump
    key = next((line for line in reversed(lines) if "Terminating process because" in line), None)
    key = re.sub(r"^[EFWI]\d{4} [\d:.]+\s+\d+ \S+\] ", "", key or (lines[-1] if lines else "no output"))
    if LOST_CONTACT in key:
        return (f"{how}: a process stopped answering for {heartbeat_of(env)} s "
                f"(its VM died or the link to it is down); JAX: {key[:200]}")
    return f"{how}: {key[:300]}"


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
                env = {**os.environ, **environment(address, self.hosts, i, self.devices_per_host,
                                                   os.environ.get("JAX_PLATFORMS", "cpu"))}
                env.pop("XLA_FLAGS", None)  # the device count comes from HARNESS_LOCAL_DEVICES
                envs.append(env)
                # Output goes to files, not pipes: a chatty worker must never block on a full pipe.
                out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
                logs.append((out, err))
                procs.append(subprocess.Popen([sys.executable, "-m", "harness.cluster.worker"], env=env, text=True,
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
