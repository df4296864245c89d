"""The live slice is what its inventory says: one Ray node per VM, with the listed GPUs."""
from harness.backends.driver_client import DriverClient


def test_ray_cluster_has_one_node_per_vm_with_its_gpus(live_slice):
    sl, address, platform = live_slice
    with DriverClient([], address, [vm.name for vm in sl.vms]) as driver:
        nodes = driver.request({"do": "nodes"})
    assert len(nodes) == len(sl.vms)
    assert all(any(vm.name in n["resources"] for n in nodes) for vm in sl.vms), "a VM's custom resource is missing"
    if platform == "gpu":
        assert sorted(n["resources"].get("GPU", 0) for n in nodes) == sorted(vm.gpus for vm in sl.vms)
