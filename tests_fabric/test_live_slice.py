"""The live slice is what its inventory says: one Ray node per VM with the listed GPUs."""


def test_ray_cluster_has_one_node_per_vm_with_its_gpus(inventory):
    import ray

    ray.init(address=inventory["ray_address"], logging_level="ERROR")
    try:
        nodes = [n for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == len(inventory["vm"])
        assert sorted(n["Resources"].get("GPU", 0) for n in nodes) == sorted(vm["gpus"] for vm in inventory["vm"])
    finally:
        ray.shutdown()
