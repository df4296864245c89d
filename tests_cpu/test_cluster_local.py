"""One worker process per VM on this machine (harness.cluster.local), joined by jax.distributed."""
import dataclasses
import statistics

import numpy as np

from harness.cluster.local import LocalProcesses
from harness.jobs import Job
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, RTOL, TRAIN

TWO_PROCESS = ("Pipeshard",)


def test_two_processes_match_single_device(benchmark, reference):
    """One process per VM over loopback (the local launcher, batch-mode workers), joined by
    jax.distributed over gloo: Pipeshard, the technique with the most cross-process traffic of its
    own making, gives the same losses. Every technique is checked the same way through Ray on the
    emulated link by the claims suite's trials."""
    jobs = [Job(name, dataclasses.asdict(MODEL), 2, 2, train=dataclasses.asdict(TRAIN),
                options={"micro_batches": MICRO_BATCHES}).to_dict() for name in TWO_PROCESS]
    per_process = benchmark.pedantic(lambda: LocalProcesses(2, 2).run(jobs), rounds=1, iterations=1)
    benchmark.extra_info.update(cluster="2x2", processes=2, model=MODEL.name, median_step_s={
        name: statistics.median(r["step_times_s"][1:]) for name, r in zip(TWO_PROCESS, per_process[0])})
    assert [r["process_index"] for r in (p[0] for p in per_process)] == [0, 1]
    for name, *results in zip(TWO_PROCESS, *per_process):
        for r in results:
            assert r["process_count"] == 2
            np.testing.assert_allclose(r["losses"], reference[MODEL.name + "True"], rtol=RTOL, err_msg=name)
