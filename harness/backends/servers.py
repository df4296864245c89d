"""A worker server (`python -m harness.backends.worker --serve`) as its launcher sees it: a process
that answers one JSON line per request. The Ray driver's VM actors and the local cluster start
them the same way."""
import json
import re
import selectors
import signal
import subprocess
import sys
import tempfile

from harness.backends.worker import heartbeat_of

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


class WorkerServer:
    def __init__(self, env: dict, where: str, preexec_fn=None):
        """env: the process's whole environment; where: the VM (or address) that failures name."""
        self.env, self.where = env, where
        self.log = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty worker never blocks
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.backends.worker", "--serve"], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                     preexec_fn=preexec_fn, start_new_session=preexec_fn is None)

    def send(self, request: dict) -> None:
        """RuntimeError (why it died) when the process has ended: a worker killed just before a
        request breaks the pipe here instead of closing its answer."""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._ended() from None

    def answer(self, timeout_s: float) -> dict:
        """The answer to the last request. TimeoutError when none comes within timeout_s,
        RuntimeError (why it died, from its stderr) when the process ended."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                raise TimeoutError(f"the worker on {self.where} did not answer within {timeout_s:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise self._ended()
        return json.loads(line)

    def _ended(self) -> RuntimeError:
        self.proc.wait()
        self.log.seek(0)
        return RuntimeError(f"the worker on {self.where} {describe_failure(self.proc.returncode, self.log.read(), self.env)}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
