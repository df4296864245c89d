"""Emulated VMs laid on this machine's devices (harness.backends.layout): one process per VM where
there is a GPU for every emulated one, one per emulated GPU on shares of fewer; then the split
path end to end through Ray on CPU devices, where CI can run it."""
import dataclasses

import numpy as np
import pytest

from harness.backends import layout, ray_clusters
from harness.core.config import Budget
from harness.platform import slices
from harness.runs import trials
from harness.suite.privileges import require_emulation

pytestmark = pytest.mark.slow  # trains through Ray on emulated VMs

TABLE_I = [("vm1", 2), ("vm2", 2)]  # every slice of Table I: two VMs of two GPUs


def test_a_machine_with_a_gpu_for_each_emulated_one_gives_each_vm_its_own():
    procs = layout.gpu(TABLE_I, ["0", "1", "2", "3", "4"])
    assert {vm: [p.devices for p in ps] for vm, ps in procs.items()} == {"vm1": [2], "vm2": [2]}
    assert procs["vm1"][0].env["CUDA_VISIBLE_DEVICES"] == "0,1" and procs["vm2"][0].env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert procs["vm1"][0].env["NCCL_HOSTID"] != procs["vm2"][0].env["NCCL_HOSTID"]
    # a VM's GPUs in one process and one host: NCCL's shared memory and CUDA IPC serve inside it
    assert not any(k in procs["vm1"][0].env for k in ("NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE"))
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in procs["vm1"][0].env  # a GPU of its own: all of it
    assert layout.sharing(procs, ["vm1", "vm2"]) is None


@pytest.mark.parametrize("physical", [["0"], ["0", "1"], ["0", "1", "2"]])
def test_fewer_gpus_than_the_slice_give_a_process_per_emulated_gpu_on_a_share(physical):
    procs = layout.gpu(TABLE_I, physical)
    every = [p for vm in ("vm1", "vm2") for p in procs[vm]]
    assert [p.devices for p in every] == [1, 1, 1, 1]
    on = [p.env["CUDA_VISIBLE_DEVICES"] for p in every]
    assert set(on) == set(physical)  # every GPU used, none named that is not there
    for gpu in physical:
        fractions = [float(p.env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) for p in every if p.env["CUDA_VISIBLE_DEVICES"] == gpu]
        # the emulated GPUs on it fit in it (one group holds the GPUs at a time: test_trials.py)
        assert sum(fractions) <= layout.SHARED_MEMORY + 1e-9
        assert min(fractions) >= layout.SHARED_MEMORY / len(fractions) - 1e-3
    assert all(p.env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" for p in every)
    # Between VMs NCCL sees other hosts, so nothing but its sockets on the link; inside a VM one
    # host where its processes are on distinct GPUs (NCCL refuses one host's ranks on one GPU).
    hosts = {vm: [p.env["NCCL_HOSTID"] for p in procs[vm]] for vm in ("vm1", "vm2")}
    assert not set(hosts["vm1"]) & set(hosts["vm2"])
    for vm in ("vm1", "vm2"):
        gpus = [p.env["CUDA_VISIBLE_DEVICES"] for p in procs[vm]]
        assert len(set(hosts[vm])) == (1 if len(set(gpus)) == len(gpus) else len(gpus)), (vm, gpus, hosts[vm])
    assert all(p.env["NCCL_SOCKET_IFNAME"] == "^lo" for p in every)
    assert not any(k in p.env for p in every for k in ("NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE"))
    shared = layout.sharing(procs, ["vm1", "vm2"])
    assert [s["gpu"] for s in shared["vm1"] + shared["vm2"]] == on
    assert [s["nccl_host"] for s in shared["vm1"] + shared["vm2"]] == hosts["vm1"] + hosts["vm2"]


def test_no_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no GPU"):
        layout.gpu(TABLE_I, [])


def test_the_gpus_are_found_without_starting_cuda_and_honour_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert layout.visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert layout.visible_gpus() == []


def test_on_cpu_a_vm_is_one_process_unless_split():
    assert {vm: [p.devices for p in ps] for vm, ps in layout.cpu(TABLE_I).items()} == {"vm1": [2], "vm2": [2]}
    assert {vm: [p.devices for p in ps] for vm, ps in layout.cpu(TABLE_I, split=True).items()} == {
        "vm1": [1, 1], "vm2": [1, 1]}


def test_emulated_vms_split_into_a_process_per_device_train_through_ray_as_one_process_each():
    """The layout a one-GPU machine gets, on CPU devices: each emulated GPU a worker process, two per
    VM's namespace, started by the VM's Ray actor. A mesh row (a VM) then spans two processes:
    ZeRO2 (reduce-scatter and all-gather over every device) and Pipeshard (stages are VMs, data
    parallel inside each) give the single device's losses, and the records say how the VMs were
    laid out. The slice states no cores, as a user's file may: each VM's Ray node then has one CPU,
    which a worker group once held so that the RTT probe beside it waited for it until Ray gave up."""
    require_emulation()
    # Near RTT: the layout is under test, not the link (at UTAH-GPN's 20 ms the test took 150 s on
    # 2 busy cores, ZeRO2's per-tensor collectives waiting out round trips).
    gpn = slices.load("UTAH-GPN").with_rtt(0.5)
    sl = dataclasses.replace(gpn, vms=tuple(dataclasses.replace(vm, cores=None) for vm in gpn.vms))
    budget = Budget(model="scale-tiny")
    kept = []
    with ray_clusters.emulated([sl], split_processes=True) as cluster:
        runner = trials.Runner(cluster, [sl], budget)
        for trial in (trials.Trial.on(sl, "ZeRO2"), trials.Trial.on(sl, "Pipeshard")):
            runner.measure(trial, kept.append)
    assert [(r["technique"], r["status"], r["cluster"]["processes_per_host"]) for r in kept] == [
        ("ZeRO2", "ok", 2), ("Pipeshard", "ok", 2)]
    assert all(r["cluster"]["gpu_sharing"] is None for r in kept)  # CPU devices: nothing shared
    assert sorted(technique for _, technique in runner.history) == ["Pipeshard", "ZeRO2"]  # both compared below
    for (vms, technique), losses in runner.history.items():
        assert losses, technique
        reference = runner.reference_losses(len(vms))
        np.testing.assert_allclose(losses, reference[:len(losses)], rtol=1e-4, err_msg=technique)
