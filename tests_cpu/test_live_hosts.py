"""`live up`'s inputs and outputs without a slice: the hosts file, the inventory it writes, the
link check and the timeouts. Bad input stops it in one line naming the file and the field or host."""
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from harness import toml_text
from harness.backends.live import bringup, host_check, hosts, links
from harness.errors import BadInput
from harness.platform import inventory, slices

TWO = '[[host]]\naddress = "10.0.0.1"\n[[host]]\naddress = "10.0.0.2"\n'


def write(tmp_path, text: str, name: str = "hosts.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_and_overrides(tmp_path):
    path = write(tmp_path, 'user = "ubuntu"\nkey = "~/.ssh/k"\njump = "me_1@bastion.fabric-testbed.net"\n'
                           '[[host]]\naddress = "2001:db8::1"\ndata_address = "10.20.0.1"\n'
                           '[[host]]\nname = "b"\naddress = "10.0.0.2"\nport = 2222\nuser = "rocky"\npython = "/opt/py/bin/python"\n')
    h = hosts.load(path)
    first, second = h.hosts
    assert (first.name, second.name) == ("vm1", "b")
    assert first.ssh.user == "ubuntu" and second.ssh.user == "rocky" and second.ssh.port == 2222
    assert first.data_address == "10.20.0.1" and second.data_address == "10.0.0.2"
    assert first.jump == hosts.Target("bastion.fabric-testbed.net", 22, "me_1", first.ssh.key)
    assert first.ssh.key.endswith("/.ssh/k") and not first.ssh.key.startswith("~")
    assert first.workdir == "/tmp/harness-live/vm1" and second.python == "/opt/py/bin/python"
    assert str(first.ssh) == "ubuntu@[2001:db8::1]:22"


def test_names_come_from_the_slice_file(tmp_path):
    h = hosts.load(write(tmp_path, 'slice = "UTAH-GPN"\n' + TWO))
    assert [x.name for x in h.hosts] == [vm.name for vm in slices.load("UTAH-GPN").vms] and h.slice.name == "UTAH-GPN"


@pytest.mark.parametrize("text, said", [
    ('[[host]]\nport = 22\n', "host[0]: missing field 'address'"),
    ('[[host]]\naddress = "10.0.0.1"\nport = 0\n', "field 'host[0].port' must be >= 1"),
    ('[[host]]\naddress = "10.0.0.1"\ncolour = "red"\n', "host[0]: unknown field 'colour'"),
    ('jump = "a b"\n' + TWO, "field 'jump' must be of the form [user@]host[:port]"),
    ('workdir = "relative/dir"\n' + TWO, "field 'workdir' must be of the form an absolute path"),
    ('host = []\n', "field 'host' must be a list of at least 1"),
    (TWO + '[[host]]\naddress = "10.0.0.1"\n', "host[2] and host[0] are one host (the same address 10.0.0.1:22)"),
    ('[[host]]\nname = "a"\naddress = "10.0.0.1"\n[[host]]\nname = "a"\naddress = "10.0.0.2"\n',
     "host[1] and host[0] are one host (the same name 'a')"),
    ('slice = "UTAH-GPN"\n[[host]]\naddress = "10.0.0.1"\n', "1 hosts, but slice UTAH-GPN has 2 VMs"),
    ('slice = "UTAH-GPN"\n[[host]]\nname = "x"\naddress = "10.0.0.1"\n[[host]]\naddress = "10.0.0.2"\n',
     "field 'host[0].name' is 'x', but VM 1 of slice UTAH-GPN is 'vm1'"),
    ('slice = "NOWHERE"\n' + TWO, "slice 'NOWHERE' is neither a Table I slice"),
    ('[[host]\n', "not valid TOML"),
    ('[[host]]\naddress = "2001:db8::1"\n', "host[0]: the VMs reach each other by IPv4 address or host name, got "
                                             "'2001:db8::1': give data_address"),
])
def test_a_bad_hosts_file_is_named_in_one_line(tmp_path, text, said):
    path = write(tmp_path, text)
    with pytest.raises(BadInput) as e:
        hosts.load(path)
    assert str(e.value).startswith(f"hosts file {path}") and said in str(e.value) and "\n" not in str(e.value)


def test_the_command_says_it_before_any_connection(tmp_path):
    path = write(tmp_path, TWO + '[[host]]\naddress = "10.0.0.2"\n')
    result = subprocess.run([sys.executable, "-m", "harness", "live", "up", path, "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"harness: error: hosts file {path}: host[2] and host[1] are one "
                                                  "host (the same address 10.0.0.2:22)"]


def test_down_needs_an_inventory_that_up_wrote(tmp_path):
    path = write(tmp_path, 'ray_address = "10.0.0.1:6379"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 1\ngpu = "T4"\n',
                 "inventory.toml")
    result = subprocess.run([sys.executable, "-m", "harness", "live", "down", path], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == f"harness: error: slice inventory {path}: field 'hosts' is missing (it was not written by `live up`)"


def test_links_more_than_five_percent_off_are_flagged():
    sl = slices.load("UTAH-GPN")
    vm1, vm2 = (vm.name for vm in sl.vms)
    want = sl.rtt_between(vm1, vm2)
    near, far = links.Link(vm1, vm2, want * 1.04, None), links.Link(vm1, vm2, want * 1.06, None)
    links.held_against([near, far], sl)
    assert near.off == [] and near.expected_rtt_ms == want
    assert len(far.off) == 1 and far.off[0].startswith(f"{vm1}-{vm2}: RTT") and "+6%" in far.off[0]
    rated = slices.with_link_defaults(sl, bandwidth_gbps=10.0)
    slow = links.Link(vm1, vm2, want, 0.5 * 10e9 / 8)
    links.held_against([slow], rated)
    assert slow.off == [f"{vm1}-{vm2}: one flow's rate 5 Gbit/s measured, the slice file gives 10 (-50%)"]
    unmeasured = links.held_against([links.Link(vm1, vm2, want, None)], rated)[0]
    assert unmeasured.off == [f"{vm1}-{vm2}: one flow's rate not measured, the slice file gives 10 Gbit/s"]
    assert links.held_against([links.Link(vm1, vm2, 99.0, None)], None)[0].off == []  # nothing to hold it against


def test_timeouts_keep_their_defaults_on_short_links_and_grow_with_long_ones():
    short = links.timeouts([links.Link("a", "b", 0.5, None)])
    assert (short["ray_health_check_timeout_ms"], short["ray_health_check_period_ms"], short["heartbeat_s"]) == \
        (links.RAY_TIMEOUT_MS, links.RAY_PERIOD_MS, links.JAX_HEARTBEAT_S)
    long = links.timeouts([links.Link("a", "b", 0.5, None), links.Link("a", "c", 250.0, None)])
    assert long["based_on_rtt_ms"] == 250.0
    assert long["ray_health_check_timeout_ms"] == links.RTTS_PER_TIMEOUT * 250 > links.RAY_TIMEOUT_MS
    assert long["heartbeat_s"] > links.JAX_HEARTBEAT_S


def test_an_inventory_as_up_writes_it_reads_back(tmp_path):
    hosts_path = write(tmp_path, TWO)
    link = links.Link("vm1", "vm2", 20.4, 1.2e9, 20.2, None, ["vm1-vm2: RTT 20.4 ms"])
    doc = {"name": "s", "ray_address": "10.0.0.1:6379", "platform": "cpu", "hosts": hosts_path,
           "timeouts": links.timeouts([link]),
           "vm": [{"name": f"vm{i}", "site": "UTAH", "gpus": 2, "gpu": "RTX6000", "gpu_names": [], "python": "3.11.2",
                   "workdir": f"/tmp/w/vm{i}"} for i in (1, 2)],
           "link": [link.to_dict()]}
    inv = inventory.load(write(tmp_path, toml_text.dumps(doc), "inventory.toml"))
    assert inv.hosts == hosts_path and inv.platform == "cpu" and [vm.name for vm in inv.slice.vms] == ["vm1", "vm2"]
    assert [links.Link.from_dict(d) for d in inv.links] == [link] and inv.timeouts == doc["timeouts"]


def harness(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120)


def test_provision_dry_run_asks_for_the_slice_files_vms_gpus_and_a_fabnet_per_site():
    result = harness("live", "provision", "--slice", "UTAH-GPN", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    sl = slices.load("UTAH-GPN")
    assert [(n["name"], n["site"], n["gpus"], n["cores"]) for n in plan["nodes"]] == \
        [(vm.name, vm.site, vm.gpus, vm.cores) for vm in sl.vms]
    assert [n["gpu_model"] for n in plan["nodes"]] == ["GPU_RTX6000", "GPU_TeslaT4"]  # FABlib's names for them
    assert plan["networks"] == [{"type": "FABNetv4", "site": s} for s in sorted({vm.site for vm in sl.vms})]


@pytest.mark.parametrize("gpu, image, said", [
    ("H100", None, "VM vm2: GPU 'H100' is not a FABRIC component (FABlib offers GPU_A30, GPU_A40, GPU_RTX6000, GPU_TeslaT4)"),
    ("A40", "windows_95", "--image: 'windows_95' is not a FABRIC image"),
])
def test_provision_dry_run_rejects_what_fabric_does_not_offer(tmp_path, gpu, image, said):
    path = write(tmp_path, 'name = "s"\nrtt_ms = 20\n[[vm]]\nsite = "UTAH"\ngpus = 1\ngpu = "A30"\n'
                           f'[[vm]]\nsite = "STAR"\ngpus = 1\ngpu = "{gpu}"\n', "s.toml")
    result = harness("live", "provision", "--slice", path, "--dry-run", *(["--image", image] if image else []))
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("harness: error: ") and said in line


def this_machine() -> dict:
    """host_check's facts about this machine, run as `live up` runs it on a VM: fed on stdin."""
    result = subprocess.run([sys.executable, "-", *bringup.requirements()], input=Path(host_check.__file__).read_text(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_this_machine_has_what_a_vm_needs_for_the_cpu_platform():
    facts = this_machine()
    assert facts["missing"] == [] and facts["python"] == platform.python_version()
    assert bringup.lacking(facts, "cpu", 2, "s") is None


@pytest.mark.parametrize("change, said", [
    # No interpreter older than 3.11 can be installed here: the check's facts are changed instead.
    ({"python": "3.9.18"}, "Python 3.9.18 at {exe}; the harness needs 3.11+"),
    ({"missing": ["jax", "ray"]}, "{exe} lacks jax, ray (install them"),
    ({"gpus": 1, "gpu_names": ["Tesla T4"]}, "1 GPUs (Tesla T4), but slice s gives it 2"),
])
def test_what_a_vm_lacks_is_said_in_words(change, said):
    facts = {**this_machine(), **change}
    assert bringup.lacking(facts, "gpu", 2, "s").startswith(said.format(exe=facts["executable"]))
