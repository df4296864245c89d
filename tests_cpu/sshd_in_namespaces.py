"""Real OpenSSH servers on an emulated slice: one sshd inside each VM's namespace, listening on the
VM's address only, so that SSH to a VM crosses the slice's delayed link as it would on FABRIC.
Keys are made for the occasion (a client key, one host key per VM) and live in a directory that
goes with the servers."""
import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def require_sshd() -> None:
    if not Path(SSHD).is_file() or shutil.which("ssh-keygen") is None:
        pytest.skip(f"no OpenSSH server ({SSHD}) or ssh-keygen here: apt-get install openssh-server")


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@contextlib.contextmanager
def servers(net, port: int = 22):
    """sshd in every VM of net; yields (keys dir, client key path, known_hosts path). Each server
    accepts the client key for root, no passwords, and an SFTP subsystem."""
    require_sshd()
    keys = Path(tempfile.mkdtemp(prefix="fh-sshd-"))
    procs = []
    try:
        client = keys / "client"
        (keys / "authorized_keys").write_text(keygen(client) + "\n")
        known = []
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        for vm, address in net.address.items():
            host_key = keys / f"host_{vm}"
            known.append(f"{address} {' '.join(keygen(host_key).split()[:2])}")
            config = keys / f"sshd_{vm}.conf"
            config.write_text("\n".join([
                f"ListenAddress {address}:{port}", f"HostKey {host_key}", f"PidFile {keys}/sshd_{vm}.pid",
                f"AuthorizedKeysFile {keys}/authorized_keys", "PermitRootLogin prohibit-password",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "Subsystem sftp internal-sftp", "MaxStartups 64"]) + "\n")
            procs.append(net.popen(vm, [SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL))
        (keys / "known_hosts").write_text("\n".join(known) + "\n")
        for vm, address in net.address.items():  # up when it accepts a connection (bash's /dev/tcp)
            wait = net.run(vm, ["bash", "-c", f"for i in $(seq 300); do (exec 3<>/dev/tcp/{address}/{port}) "
                                              "2>/dev/null && exit 0; sleep 0.1; done; exit 1"], capture_output=True)
            assert wait.returncode == 0, f"sshd on {vm} did not accept a connection within 30 s"
        yield keys, client, keys / "known_hosts"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(keys, ignore_errors=True)

