"""The live slice is what its inventory says: one Ray node per VM, with the listed GPUs."""
from harness.backends.driver_client import DriverClient
from harness.backends.ray_clusters import driver_command


def test_ray_cluster_has_one_node_per_vm_with_its_gpus(live_slice):
    inv = live_slice
    with DriverClient([], inv.ray_address, [vm.name for vm in inv.slice.vms], command=driver_command(inv)) as driver:
        nodes = driver.request({"do": "nodes"})
    assert len(nodes) == len(inv.slice.vms)
    assert all(any(vm.name in n["resources"] for n in nodes) for vm in inv.slice.vms), "a VM's custom resource is missing"
    if inv.platform == "gpu":
        assert sorted(n["resources"].get("GPU", 0) for n in nodes) == sorted(vm.gpus for vm in inv.slice.vms)
