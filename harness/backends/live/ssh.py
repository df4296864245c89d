"""SSH to a live slice's VMs, all of them at once (asyncssh).

asyncssh because `live up` talks to every VM in parallel, each through FABRIC's bastion: one
event loop holds all the connections and their jump hosts, where Paramiko needs a thread per
connection, and Fabric (Paramiko underneath) runs its groups in threads too. It is maintained,
pure Python, and speaks OpenSSH's configuration and key formats.

Every failure becomes HostError: one line naming the VM and what went wrong.

`python -m harness.backends.live.ssh pipe HOSTS VM -- COMMAND...` runs COMMAND on VM and joins
its standard input and output to this process's: the Ray driver of a live slice runs on VM1 and
is spoken to this way (harness.backends.ray_clusters).
"""
import asyncio
import contextlib
import shlex
import sys
import warnings
from collections.abc import Awaitable, Callable

# asyncssh still names DSA keys, which cryptography 51 deprecates with a warning at import time.
# Every command that can reach a live slice imports this module, and the warning landed on stderr
# ahead of their one-line errors; the suite never offers a DSA key, so the warning says nothing here.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated", category=UserWarning)
    import asyncssh

from harness import progress
from harness.backends.live.hosts import Host, Hosts, Target, load
from harness.errors import BadInput

CONNECT_TIMEOUT_S = 20.0
# Keepalives detect a VM that went away mid-command (a rebooted VM answers nothing, not a reset).
KEEPALIVE_S = 15.0


class HostError(BadInput):
    def __init__(self, host: Host, what: str):
        super().__init__(f"{host}: {what}")
        self.host = host


def _options(target: Target, known_hosts: str | None, tunnel=None) -> dict:
    options = {"port": target.port, "known_hosts": known_hosts, "connect_timeout": CONNECT_TIMEOUT_S,
               "keepalive_interval": KEEPALIVE_S, "tunnel": tunnel}
    if target.user:
        options["username"] = target.user
    if target.key:
        options["client_keys"] = [target.key]
    return options


def _why(e: BaseException, target: Target) -> str:
    if isinstance(e, asyncssh.PermissionDenied):
        return f"the key was refused by {target}"
    if isinstance(e, asyncssh.HostKeyNotVerifiable):
        return f"the host key of {target} is not the one known_hosts has ({e.reason})"
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return f"unreachable: {target} did not answer within {CONNECT_TIMEOUT_S:.0f} s"
    if isinstance(e, OSError):
        return f"unreachable: {target}: {e.strerror or e}"
    if isinstance(e, asyncssh.KeyImportError) or isinstance(e, FileNotFoundError):
        return f"cannot read the key for {target}: {e}"
    return f"SSH to {target} failed: {e}"


class Session:
    """One VM's SSH connection (through its jump host, if any), open for the session's duration."""

    def __init__(self, host: Host, known_hosts: str | None):
        self.host, self.known_hosts = host, known_hosts
        self.conn: asyncssh.SSHClientConnection | None = None
        self.jump: asyncssh.SSHClientConnection | None = None

    async def open(self) -> "Session":
        target = self.host.jump
        try:
            if target is not None:
                self.jump = await asyncssh.connect(target.address, **_options(target, self.known_hosts))
            target = self.host.ssh
            self.conn = await asyncssh.connect(target.address, **_options(target, self.known_hosts, self.jump))
        except (OSError, asyncssh.Error, asyncio.TimeoutError, ValueError) as e:
            await self.close()
            raise HostError(self.host, _why(e, target)) from None
        return self

    async def close(self) -> None:
        for conn in (self.conn, self.jump):
            if conn is not None:
                conn.close()
                with contextlib.suppress(Exception):
                    await conn.wait_closed()
        self.conn = self.jump = None

    async def run(self, command: str, what: str, input: str | None = None, timeout: float | None = 600,
                  check: bool = True) -> asyncssh.SSHCompletedProcess:
        """The command's result; HostError naming `what` if it fails (check) or outlasts timeout."""
        try:
            result = await self.conn.run(command, input=input, timeout=timeout, check=False)
        except asyncssh.TimeoutError:
            raise HostError(self.host, f"{what}: no end within {timeout:.0f} s") from None
        except (OSError, asyncssh.Error) as e:
            raise HostError(self.host, f"{what}: the connection failed ({e})") from None
        if check and result.exit_status != 0:
            said = (result.stderr or result.stdout or "").strip().splitlines()
            raise HostError(self.host, f"{what} failed: {said[-1] if said else f'exit status {result.exit_status}'}")
        return result

    async def put(self, local: str, remote: str) -> None:
        try:
            async with self.conn.start_sftp_client() as sftp:
                await sftp.put(local, remote)
        except (OSError, asyncssh.Error) as e:
            raise HostError(self.host, f"copying {local} to {remote}: {e}") from None


async def sessions(hosts: Hosts) -> list[Session]:
    """Open sessions to every host at once; if any fails, all are closed and its HostError raised
    (the first in the hosts file's order, so that the line a user sees does not depend on timing)."""
    opened = await asyncio.gather(*(Session(h, hosts.known_hosts).open() for h in hosts.hosts), return_exceptions=True)
    failed = [e for e in opened if isinstance(e, BaseException)]
    if failed:
        await close_all([s for s in opened if isinstance(s, Session)])
        raise failed[0]
    return opened


async def close_all(opened: list[Session]) -> None:
    await asyncio.gather(*(s.close() for s in opened))


async def each(opened: list[Session], step: str, do: Callable[[Session], Awaitable]) -> list:
    """do(session) on every VM at once, with a line on stderr as each is done; the results in the
    sessions' order. Every VM's step runs to its end before the first failure is raised."""
    async def one(s: Session):
        result = await do(s)
        progress.say(f"{s.host.name}: {step}: done")
        return result

    results = await asyncio.gather(*(one(s) for s in opened), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return results


async def _pipe(hosts: Hosts, vm: str, command: list[str]) -> int:
    [session] = await sessions(Hosts((hosts.by_name(vm),), None, hosts.known_hosts, hosts.path))
    try:
        process = await session.conn.create_process(shlex.join(command), encoding=None,
                                                    stdin=sys.stdin.buffer, stdout=sys.stdout.buffer,
                                                    stderr=sys.stderr.buffer)
        return (await process.wait()).exit_status or 0
    finally:
        await session.close()


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[0] != "pipe" or argv[3] != "--":
        print("usage: python -m harness.backends.live.ssh pipe HOSTS VM -- COMMAND...", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_pipe(load(argv[1]), argv[2], argv[4:]))
    except BadInput as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
