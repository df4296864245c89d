"""`python -m tests_cpu.one_core_steps CORE STEPS`: the conformance model trained STEPS steps by the
2x2 tensor-parallel Shard plan, four CPU devices in this one process, all pinned to core CORE.

The step that XLA's CPU runtime deadlocked in CI (conftest.py, ONE_PROCESS_CLUSTER_FLAG): its
collectives over two devices and over all four can be in flight together. On one core that another
process keeps busy, the deadlock comes soonest.
"""
import dataclasses
import os
import sys

if __name__ == "__main__":  # pinned before JAX sizes its thread pools
    os.sched_setaffinity(0, {int(sys.argv[1])})

from harness.core import data, train  # noqa: E402
from harness.techniques import ClusterShape, technique  # noqa: E402
from harness.techniques.shard_parallel import IntraOpPlan  # noqa: E402
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, TRAIN  # noqa: E402

TENSOR_PARALLEL = IntraOpPlan(data=(2, 1), tensor=(1, 2), shard_optimizer=True)


def main(steps: int) -> None:
    run = dataclasses.replace(TRAIN, steps=steps)
    plan = technique("Shard", micro_batches=MICRO_BATCHES, plan=TENSOR_PARALLEL).build(MODEL, ClusterShape(2, 2),
                                                                                      run, steps)
    packed = data.prepare(MODEL.vocab_size, run.seq_len, run.batch_size, data.load_corpus())
    losses = train.train_plan(plan, MODEL, run, packed).losses
    print(f"{len(losses)} steps, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main(int(sys.argv[2]))
