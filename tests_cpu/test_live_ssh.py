"""`live up`, `pytest -m fabric` and `live down` against real OpenSSH servers on an emulated slice.

Each emulated VM runs sshd in its namespace (tests_cpu/sshd_in_namespaces.py); the user's side
runs inside VM1, as a user on a laptop whose only way to the VMs is SSH: vm2 is reached through
vm1 as a jump host, as FABRIC's VMs are through its bastion. The harness goes over as a wheel, Ray
comes up with the hosts' resources, the links are measured, and the fabric suite runs a trial
through an inventory it did not write. Bad hosts stop `live up` in one line, before it starts
anything, and every path leaves nothing behind.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.backends import process_trees
from harness.backends.emulation.network import EmulatedNetwork
from harness.backends.live import bringup
from harness.platform import slices
from harness.runs import records
from harness.suite.privileges import require_emulation
from tests_cpu import sshd_in_namespaces as sshd

pytestmark = pytest.mark.slow  # brings up emulated slices with SSH servers, Ray and a trial

ROOT = Path(__file__).resolve().parents[1]
RTT_MS = 10.0


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    return bringup.build_wheel(str(tmp_path_factory.mktemp("wheel")))


@contextlib.contextmanager
def slice_with_sshd(vms: int):
    require_emulation()
    sl = slices.load("UTAH-GPN").with_rtt(RTT_MS)
    if vms != len(sl.vms):  # more VMs, alternating between the two sites
        doc = {"name": f"UTAH-GPN-{vms}", "rtt_ms": RTT_MS,
               "vm": [{"name": f"vm{i + 1}", "site": sl.vms[i % 2].site, "gpus": 2, "gpu": sl.vms[i % 2].gpu}
                      for i in range(vms)]}
        sl = slices.from_document(doc, "test")
    with EmulatedNetwork(sl) as net, sshd.servers(net) as (keys, client, known):
        yield sl, net, client, known


@pytest.fixture(scope="module")
def two_vms():
    with slice_with_sshd(2) as made:
        yield made


@pytest.fixture
def workbase():
    """A short directory for the VMs' workdirs (Ray's sockets live under it); whatever is left
    under it, processes or files, is removed when the test ends, pass or fail."""
    base = tempfile.mkdtemp(prefix="fhl-", dir="/tmp")
    try:
        yield base
    finally:
        leftover = running_under(base)
        process_trees.kill(lambda: running_under(base), 3.0)
        shutil.rmtree(base, ignore_errors=True)
        assert not leftover, f"processes left under {base}: {leftover}"


def running_under(base: str) -> list[int]:
    spared = process_trees.ancestors(os.getpid())
    pids = [p for p in process_trees.all_pids() if p not in spared]
    return process_trees.in_trees(pids, {p for p in pids if process_trees.mentions(p, base)})


def slice_file(tmp_path: Path, sl, rtt_ms: float) -> Path:
    path = tmp_path / f"{sl.name}.toml"
    vms = "".join(f'\n[[vm]]\nname = "{vm.name}"\nsite = "{vm.site}"\ngpus = {vm.gpus}\ngpu = "{vm.gpu}"\n'
                  for vm in sl.vms)
    path.write_text(f'name = "{sl.name}"\nrtt_ms = {rtt_ms}\n{vms}')
    return path


def hosts_file(tmp_path: Path, net, client, known, workbase: str, slice_path: Path | None, **first) -> Path:
    """Every VM as root over SSH, the first directly, the others through it; `first` changes the first host."""
    head = ['user = "root"', f'key = "{client}"', f'known_hosts = "{known}"', f'python = "{sys.executable}"',
            f'workdir = "{workbase}/{{vm}}"'] + ([f'slice = "{slice_path}"'] if slice_path else [])
    entries = []
    for i, (vm, address) in enumerate(net.address.items()):
        fields = {"name": vm, "address": address, **({} if i else first)}
        if i:
            fields["jump"] = f"root@{net.address['vm1']}"
        entries.append("\n[[host]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    path = tmp_path / "hosts.toml"
    path.write_text("\n".join(head) + "\n" + "".join(entries))
    return path


def harness_in_vm1(net, tmp_path, *args, timeout=600) -> subprocess.CompletedProcess:
    return net.run("vm1", [sys.executable, "-m", "harness", *args], cwd=tmp_path, capture_output=True, text=True,
                   timeout=timeout)


def live_up(net, client, known, workbase: str, tmp_path: Path, slice_path: Path, wheel: str):
    """`live up` from VM1 on CPUs; (its result, the inventory's path). Its time goes to stderr (-s shows it)."""
    hosts = hosts_file(tmp_path, net, client, known, workbase, slice_path)
    inventory = tmp_path / "inventory.toml"
    start = time.monotonic()
    up = harness_in_vm1(net, tmp_path, "live", "up", str(hosts), "--platform", "cpu", "--wheel", wheel,
                        "--inventory", str(inventory), "--json")
    print(f"live up, {len(net.address)} VMs: {time.monotonic() - start:.1f} s", file=sys.stderr)
    return up, inventory


def test_up_fabric_down(two_vms, wheel, workbase, tmp_path):
    """The slice file asks for twice the link's RTT: up says so, every record and claims.md flag
    it, and --strict-link stops the fabric session before its first trial."""
    sl, net, client, known = two_vms
    up, inventory = live_up(net, client, known, workbase, tmp_path, slice_file(tmp_path, sl, 2 * RTT_MS), wheel)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        doc = json.loads(up.stdout)
        [link] = doc["link"]
        assert (link["a"], link["b"], link["expected_rtt_ms"]) == ("vm1", "vm2", 2 * RTT_MS)
        assert RTT_MS <= link["rtt_ms"] < 1.5 * RTT_MS and link["bytes_per_s"] > 0  # the delayed link, measured
        assert doc["links_off"] == link["off"] and len(link["off"]) == 1 and "the slice file gives 20" in link["off"][0]
        assert doc["ray_address"] == f"{net.address['vm1']}:{bringup.RAY_PORT}" and inventory.is_file()
        assert running_under(workbase), "Ray is not running in the VMs' workdirs"

        status = harness_in_vm1(net, tmp_path, "live", "status", str(inventory), "--json", timeout=300)
        assert status.returncode == 0, status.stderr[-3000:]
        assert json.loads(status.stdout)["missing"] == [] and len(json.loads(status.stdout)["nodes"]) == 2

        report = tmp_path / "report"
        fabric = fabric_suite(net, inventory, "test_ray_cluster or (test_trial and Data and 4gpu)", "--report-dir",
                              str(report))
        assert fabric.returncode == 0, fabric.stdout[-3000:] + fabric.stderr[-2000:]
        assert "2 passed" in fabric.stdout, fabric.stdout[-3000:]
        [r] = records.read(report / "results.jsonl")
        assert r["status"] == "ok" and r["cluster"]["network"]["mechanism"] == "live"
        check = r["cluster"]["network"]["link_check"]  # measured again, before the first trial
        assert [(m["a"], m["b"]) for m in check["measured"]] == [("vm1", "vm2")] and check["tolerance"] == 0.05
        assert len(check["off"]) == 1 and check["off"][0].startswith("vm1-vm2: RTT")
        assert f"**OFF by more than 5%**: {check['off'][0]}" in (report / "claims.md").read_text()

        strict = fabric_suite(net, inventory, "test_trial and Data and 4gpu", "--strict-link")
        assert strict.returncode == 3, strict.stdout[-3000:]
        assert "--strict-link: the slice's link is not its slice file's: vm1-vm2: RTT" in strict.stdout + strict.stderr
    finally:
        down = harness_in_vm1(net, tmp_path, "live", "down", str(inventory), "--json", timeout=300)
    assert down.returncode == 0, down.stderr[-3000:]
    assert sum(json.loads(down.stdout)["stopped"].values()) > 0
    assert not running_under(workbase) and not any(Path(workbase).iterdir()) and not inventory.exists()


def fabric_suite(net, inventory: Path, tests: str, *args) -> subprocess.CompletedProcess:
    """`pytest -m fabric` on the inventory, from VM1: the user's side of the slice."""
    return net.run("vm1", [sys.executable, "-m", "pytest", "tests_fabric", "-m", "fabric", "-p", "no:cacheprovider",
                           "-q", "-k", tests, "--slice-inventory", str(inventory), "--trial-model", "scale-tiny", *args],
                   cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_four_vms_come_up_and_go_down(wheel, workbase, tmp_path):
    with slice_with_sshd(4) as (sl, net, client, known):
        up, inventory = live_up(net, client, known, workbase, tmp_path, slice_file(tmp_path, sl, RTT_MS), wheel)
        try:
            assert up.returncode == 0, up.stderr[-3000:]
            assert len(json.loads(up.stdout)["link"]) == 6  # every pair
            status = harness_in_vm1(net, tmp_path, "live", "status", str(inventory), "--json", timeout=300)
            assert status.returncode == 0 and len(json.loads(status.stdout)["nodes"]) == 4, status.stderr[-3000:]
        finally:
            down = harness_in_vm1(net, tmp_path, "live", "down", str(inventory), timeout=300)
        assert down.returncode == 0, down.stderr[-3000:]
        assert not running_under(workbase) and not any(Path(workbase).iterdir())


@pytest.mark.parametrize("case", ["unreachable", "refused key", "no python 3.11", "gpus differ", "link off"])
def test_a_bad_host_stops_up_in_one_line_and_leaves_nothing(two_vms, wheel, workbase, tmp_path, case):
    sl, net, client, known = two_vms
    rtt = RTT_MS * 2 if case == "link off" else RTT_MS  # the slice file asks for twice the link's RTT
    vm1 = net.address["vm1"]
    first, said, also, extra = {}, f"vm1 (root@{vm1}:22): ", "", []
    if case == "unreachable":
        first, said = {"port": 2222}, f"vm1 (root@{vm1}:2222): unreachable:"
    elif case == "refused key":
        stranger = tmp_path / "stranger"
        sshd.keygen(stranger)
        first, also = {"key": str(stranger)}, f"the key was refused by root@{vm1}:22"
    elif case == "no python 3.11":
        first, also = {"python": "python3.9"}, "cannot run Python as 'python3.9'"
    elif case == "gpus differ":  # this machine's GPUs, none in CI, are not the slice file's two per VM
        also = f"but slice {sl.name} gives it 2"
    else:
        said, also, extra = "--strict-link: vm1-vm2: RTT", "the slice file gives 20", ["--strict-link"]
    hosts = hosts_file(tmp_path, net, client, known, workbase, slice_file(tmp_path, sl, rtt), **first)
    platform = "gpu" if case == "gpus differ" else "cpu"
    up = harness_in_vm1(net, tmp_path, "live", "up", str(hosts), "--platform", platform, "--wheel", wheel, *extra,
                        "--json")
    assert up.returncode == 2 and up.stdout == "", up.stderr[-3000:]
    error = [line for line in up.stderr.splitlines() if line.startswith("harness: error:")]
    assert len(error) == 1 and error[0].startswith(f"harness: error: {said}") and also in error[0], up.stderr[-3000:]
    assert not running_under(workbase) and not any(Path(workbase).iterdir()), "live up left something behind"
    assert not (tmp_path / "inventory.toml").exists()
