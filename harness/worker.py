"""`python -m harness.worker`: one VM's process in a multi-process run.

It reads a list of jobs (JSON) on stdin, joins the others through jax.distributed, runs the
jobs in order and prints their results as one JSON line on stdout. The launcher sets:
HARNESS_COORDINATOR (host:port of process 0), HARNESS_NUM_PROCESSES, HARNESS_PROCESS_ID,
HARNESS_LOCAL_DEVICES (CPU devices of this process, the scale model's GPUs), and optionally
HARNESS_HEARTBEAT_S: a process that cannot reach the others for that long (a link down) makes the
whole run fail instead of hang (default 30 s; JAX's own default is 100 s).
"""
import json
import os
import sys


def main() -> int:
    jobs = json.load(sys.stdin)
    import jax

    if jax.config.jax_platforms in (None, "", "cpu"):
        jax.config.update("jax_num_cpu_devices", int(os.environ["HARNESS_LOCAL_DEVICES"]))
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # collectives over TCP
    jax.distributed.initialize(coordinator_address=os.environ["HARNESS_COORDINATOR"],
                               num_processes=int(os.environ["HARNESS_NUM_PROCESSES"]),
                               process_id=int(os.environ["HARNESS_PROCESS_ID"]),
                               initialization_timeout=120,
                               heartbeat_timeout_seconds=int(os.environ.get("HARNESS_HEARTBEAT_S", "30")))
    from harness.jobs import Job, execute

    try:
        results = [execute(Job.from_dict(job)) for job in jobs]
    finally:
        jax.distributed.shutdown()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
