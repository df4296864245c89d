"""The paper's four techniques, named and defined as Alpa's classes (docs/design.md, section 1).

Each technique turns (model config, cluster shape, training config) into a Plan: the parameter
layout and shardings, the optimizer state's, and a compiled train step; Plan.describe() says
what it does in words. The model code knows nothing of any of it.
"""
from harness.config import Technique
from harness.errors import BadInput
from harness.techniques.common import ClusterShape, Plan
from harness.techniques.data_parallel import DataParallel
from harness.techniques.pipeshard import PipeshardParallel
from harness.techniques.shard_parallel import ShardParallel
from harness.techniques.zero2 import Zero2Parallel

TECHNIQUES = {cls.name: cls for cls in (DataParallel, Zero2Parallel, ShardParallel, PipeshardParallel)}


def mesh_shape(name: str, hosts: int, devices_per_host: int) -> ClusterShape:
    """The mesh a technique compiles for on `hosts` VMs. On one VM, Pipeshard's stages are the VM's
    GPUs (Alpa's 1x1 submeshes); every other technique uses the VMs' GPUs as one mesh."""
    if hosts == 1 and name == Technique.PIPESHARD:
        return ClusterShape(devices_per_host, 1)
    return ClusterShape(hosts, devices_per_host)


def technique(name: str, **options):
    try:
        return TECHNIQUES[name](**options)
    except KeyError:
        raise BadInput(f"unknown technique {name!r}; expected one of {', '.join(TECHNIQUES)}") from None


__all__ = ["TECHNIQUES", "ClusterShape", "Plan", "mesh_shape", "technique"]
