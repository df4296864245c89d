"""The paper's four techniques, named and defined as Alpa's classes (docs/design.md, section 1).

Each technique is one file and one registered class (contract.py): it turns (model config,
cluster shape, training config) into a Plan, the parameter layout and shardings, the optimizer
state's, and a compiled train step, with Plan.describe() saying what it does in words; and it
says what one step costs, its wire included. The model code knows nothing of any of it.
"""
from harness.errors import BadInput
from harness.techniques.common import ClusterShape, Plan
from harness.techniques.contract import REGISTRY, lookup, register

# Each registers itself on import; the registry lists them in the paper's order (contract.register).
from harness.techniques.data_parallel import DataParallel
from harness.techniques.diloco import DiLoCo
from harness.techniques.pipeshard import PipeshardParallel
from harness.techniques.shard_alpa import AlpaShardParallel
from harness.techniques.shard_parallel import ShardParallel
from harness.techniques.zero2 import Zero2Parallel

# Every registered technique by name: the paper's four (config.Technique) and any added beside them.
TECHNIQUES = REGISTRY


def mesh_shape(name: str, hosts: int, devices_per_host: int) -> ClusterShape:
    """The mesh a technique compiles for on `hosts` VMs (ParallelMethod.mesh)."""
    return technique_class(name).mesh(ClusterShape(hosts, devices_per_host))


def technique_class(name: str):
    try:
        return lookup(name)
    except KeyError:
        raise BadInput(f"unknown technique {name!r}; expected one of {', '.join(TECHNIQUES)}") from None


def technique(name: str, **options):
    return technique_class(name)(**options)


__all__ = ["TECHNIQUES", "AlpaShardParallel", "ClusterShape", "DataParallel", "DiLoCo", "PipeshardParallel", "Plan", "ShardParallel",
           "Zero2Parallel", "mesh_shape", "register", "technique", "technique_class"]
