"""The Ray driver of an emulated or live slice, run on VM1: `python -m harness.emulation.ray_driver`.

Request on stdin (JSON), answer on stdout (one JSON line):
    {"do": "nodes"}                      -> the alive nodes: address and resources
    {"do": "where"}                      -> for each VM, the address its pinned actor sees
    {"do": "train", "jobs": [...], "devices_per_host": d, "heartbeat_s": 30}
                                         -> per VM, the results of harness.worker running the jobs
Training workers are Ray actors pinned one per VM (placement group, STRICT_SPREAD, and the VM's
custom resource); each starts `python -m harness.worker`, which brings up jax.distributed with
VM1's actor as coordinator, exactly as the local launcher does.
"""
import json
import os
import socket
import subprocess
import sys

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from harness.launch import describe_failure

COORDINATOR_PORT = 7310


@ray.remote(num_cpus=1)
class VMWorker:
    def address(self) -> str:
        return socket.gethostbyname(socket.gethostname())

    def train(self, jobs: list, env: dict, timeout: float) -> list:
        result = subprocess.run([sys.executable, "-m", "harness.worker"], input=json.dumps(jobs), text=True,
                                capture_output=True, env={**os.environ, **env}, timeout=timeout)
        if result.returncode:
            raise RuntimeError(f"harness.worker on {self.address()} {describe_failure(result.returncode, result.stderr)}")
        return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    request = json.load(sys.stdin)
    ray.init(address=request["address"], logging_level="ERROR", log_to_driver=False)
    try:
        print(json.dumps(handle(request)))
    finally:
        ray.shutdown()


def handle(request: dict):
    if request["do"] == "nodes":
        return [{"address": n["NodeManagerAddress"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
    vms = request["vms"]
    group = placement_group([{"CPU": 1, vm: 1} for vm in vms], strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=120)
    try:
        actors = [VMWorker.options(resources={vm: 1}, scheduling_strategy=PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=i)).remote() for i, vm in enumerate(vms)]
        if request["do"] == "where":
            return dict(zip(vms, ray.get([a.address.remote() for a in actors])))
        coordinator = f"{request['addresses'][vms[0]]}:{COORDINATOR_PORT}"
        envs = [{"HARNESS_COORDINATOR": coordinator, "HARNESS_NUM_PROCESSES": str(len(vms)),
                 "HARNESS_PROCESS_ID": str(i), "HARNESS_LOCAL_DEVICES": str(request["devices_per_host"]),
                 "JAX_PLATFORMS": request.get("platform", "cpu"),
                 "HARNESS_HEARTBEAT_S": str(request.get("heartbeat_s", 30)),
                 # On GPUs, NCCL must see separate hosts, or it would bypass the link through shared memory.
                 "NCCL_HOSTID": vm, "NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}
                for i, vm in enumerate(vms)]
        results = ray.get([a.train.remote(request["jobs"], env, request.get("timeout", 900))
                           for a, env in zip(actors, envs)])
        return dict(zip(vms, results))
    finally:
        remove_placement_group(group)


if __name__ == "__main__":
    main()
