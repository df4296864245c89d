"""The paper's four techniques, named and defined as Alpa's classes (DESIGN.md section 1).

Each technique turns (model config, cluster shape, training config) into a Plan: the parameter
layout and shardings, the optimizer state's, and a compiled train step; Plan.describe() says
what it does in words. The model code knows nothing of any of it.
"""
from harness.errors import BadInput
from harness.techniques.common import ClusterShape, Plan
from harness.techniques.data_parallel import DataParallel
from harness.techniques.pipeshard import PipeshardParallel
from harness.techniques.shard_parallel import ShardParallel
from harness.techniques.zero2 import Zero2Parallel

TECHNIQUES = {cls.name: cls for cls in (DataParallel, Zero2Parallel, ShardParallel, PipeshardParallel)}


def technique(name: str, **options):
    try:
        return TECHNIQUES[name](**options)
    except KeyError:
        raise BadInput(f"unknown technique {name!r}; expected one of {', '.join(TECHNIQUES)}") from None


__all__ = ["TECHNIQUES", "ClusterShape", "Plan", "technique"]
