"""One worker process per VM on this machine (harness.backends.local), joined by jax.distributed."""
import dataclasses
import os
import signal
import statistics

import numpy as np
import pytest

from harness.backends.local import LocalProcesses
from harness.backends.servers import WorkerServer, describe_failure
from harness.backends.worker import environment
from harness.runs.jobs import Job
from tests_cpu.techniques_setup import MICRO_BATCHES, MODEL, RTOL, TRAIN

pytestmark = pytest.mark.slow  # trains in several processes

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


def test_a_lost_process_is_reported_with_the_workers_own_heartbeat():
    """The launcher reads the heartbeat from the worker's environment, not its own: a run given
    10 s says 10 s (read from the launcher's environment, where none is set, it said the default 30)."""
    stderr = ("E1125 10:00:00.000000   123 client.cc:99] Terminating process because the JAX distributed "
              "service detected fatal errors. This most likely indicates that another task died.\n"
              "*** SIGABRT received by PID 123\n@ 0x7f0000 (unknown)\n")
    said = describe_failure(-signal.SIGABRT, stderr, environment("127.0.0.1:1", 2, 1, 2, heartbeat_s=10))
    assert said.startswith("killed by SIGABRT: a process stopped answering for 10 s (its VM died or the link"), said
    assert said.endswith("another task died."), said
    assert describe_failure(3, "Traceback ...\nValueError: bad batch\n", {}) == "exited with 3: ValueError: bad batch"


def test_a_request_to_a_worker_that_was_killed_says_how_it_died():
    """A worker killed before a request breaks the pipe at the request, not at its answer: the
    launcher says the same of both, from the worker's exit status (a broken pipe once said only
    "[Errno 32] Broken pipe" where a loaded machine delivered the kill before the request)."""
    server = WorkerServer(dict(os.environ), "vm1")
    try:
        server.proc.kill()
        server.proc.wait()
        with pytest.raises(RuntimeError, match=r"^the worker on vm1 killed by SIGKILL: "):
            server.send({"do": "ping"})
    finally:
        server.kill()


def test_workers_on_gpus_ask_jax_for_cuda_by_name():
    """JAX 0.11 reads JAX_PLATFORMS=gpu as CUDA and ROCm, and the first use of JAX in a process
    without ROCm failed (every Data trial on a lent H200: each was its worker's first)."""
    assert environment("127.0.0.1:1", 2, 0, 1, platform="gpu")["JAX_PLATFORMS"] == "cuda"
    assert environment("127.0.0.1:1", 2, 0, 1, platform="cpu")["JAX_PLATFORMS"] == "cpu"
