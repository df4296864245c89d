"""`python -m harness.backends.worker [--serve]`: one process of a multi-process run: a VM's, or one
of a VM's processes where its GPUs are shared (harness.backends.layout).

The launcher (harness.backends.local, or the Ray driver on a slice) sets its environment with
environment(): HARNESS_COORDINATOR (host:port of process 0), HARNESS_NUM_PROCESSES,
HARNESS_PROCESS_ID (numbered VM by VM), HARNESS_LOCAL_DEVICES (CPU devices of this process, the
scale model's GPUs), and HARNESS_HEARTBEAT_S: a process that cannot reach the others for that long (a link down)
makes the whole run fail instead of hang (default 30 s; JAX's own default is 100 s).

Batch mode reads a list of jobs (JSON) on stdin, runs them in order and prints their results as
one JSON line. Serve mode keeps compiled steps alive between requests, so that a latency sweep
compiles each technique once, with the training state of all but the one that runs in host memory
(train.Stepper.park); it reads one request per line and answers each with one line:
    {"do": "build", "key": k, "job": {...}, "budget_steps": n}  -> {"compile_s", "description", "bytes_per_device"}
    {"do": "steps", "key": k, "n": n}                           -> {"losses", "step_times_s"} of those n steps,
                                                                   "peak_bytes": the allocator's peak (GPUs)
    {"do": "eval", "key": k}                                    -> {"held_out_loss"}: its model on the job's
                                                                   held-out blocks (Job.held_out)
    {"do": "restart", "key": k}                                 -> {}: its untrained state again, at step 0
    {"do": "exit"}                                              -> {} and the process ends
A request that fails answers with the error shape of harness.backends.protocol and the server goes
on, unless the failure broke the processes' connection, in which case JAX ends the process.
Every process of a run gets the same requests in the same order.
"""
import json
import os
import sys

HEARTBEAT_S = 30  # JAX's own default is 100 s
# The suite's GPUs are NVIDIA's (NCCL, nvidia-smi). JAX 0.11 reads JAX_PLATFORMS=gpu as CUDA and
# ROCm, and where no ROCm plugin is installed the first use of JAX in a process fails; the second
# finds CUDA already up. On a lent H200 that failed the first trial of every worker process.
JAX_PLATFORM = {"gpu": "cuda"}


def inherited(environ) -> dict[str, str]:
    """What a worker process (or an emulated VM's Ray node, which starts them) takes of its
    launcher's environment: all but XLA_FLAGS. A worker's XLA settings are its own (its device
    count comes from HARNESS_LOCAL_DEVICES), not those of the process that launches it, such as
    the test process's (conftest.py)."""
    return {k: v for k, v in environ.items() if k != "XLA_FLAGS"}


def environment(coordinator: str, num_processes: int, process_id: int, local_devices: int, platform: str = "cpu",
                heartbeat_s: float = HEARTBEAT_S) -> dict[str, str]:
    """The environment variables of one worker process (added to the launcher's own, and to those
    of its place in the layout, harness.backends.layout)."""
    return {"HARNESS_COORDINATOR": coordinator, "HARNESS_NUM_PROCESSES": str(num_processes),
            "HARNESS_PROCESS_ID": str(process_id), "HARNESS_LOCAL_DEVICES": str(local_devices),
            "JAX_PLATFORMS": JAX_PLATFORM.get(platform, platform), "HARNESS_HEARTBEAT_S": str(heartbeat_s)}


def heartbeat_of(env) -> int:
    """A worker's heartbeat timeout, from its environment."""
    return int(float(env.get("HARNESS_HEARTBEAT_S", HEARTBEAT_S)))


def init_distributed() -> None:
    import jax  # deferred: only a VM's process loads it, once init_distributed has set JAX up

    if jax.config.jax_platforms in (None, "", "cpu"):
        jax.config.update("jax_num_cpu_devices", int(os.environ["HARNESS_LOCAL_DEVICES"]))
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # collectives over TCP
    if int(os.environ["HARNESS_NUM_PROCESSES"]) > 1:
        jax.distributed.initialize(coordinator_address=os.environ["HARNESS_COORDINATOR"],
                                   num_processes=int(os.environ["HARNESS_NUM_PROCESSES"]),
                                   process_id=int(os.environ["HARNESS_PROCESS_ID"]),
                                   initialization_timeout=120,
                                   heartbeat_timeout_seconds=heartbeat_of(os.environ))


def allocator_peak() -> int | None:
    """The most any of this process's devices held at once since it started (XLA's allocator keeps
    no per-step peak); None where the devices keep no such count (CPUs)."""
    import jax  # deferred: only a VM's process loads it, once init_distributed has set JAX up

    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    return max(peaks) if peaks and None not in peaks else None


def batch() -> int:
    jobs = json.load(sys.stdin)
    init_distributed()
    import jax  # deferred: only a VM's process loads it, once init_distributed has set JAX up

    # deferred: only a VM's process loads it, once init_distributed has set JAX up
    from harness.runs.jobs import Job, execute

    try:
        results = [execute(Job.from_dict(job)) for job in jobs]
    finally:
        jax.distributed.shutdown()
    print(json.dumps(results))
    return 0


def serve() -> int:
    # Answers get the real stdout to themselves; anything else that writes there (a library's
    # print, a C++ log line) goes to stderr, so that every line the caller reads is an answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    init_distributed()
    # deferred: only a VM's process loads it, once init_distributed has set JAX up
    from harness.backends import protocol
    from harness.runs.jobs import Job, held_out_loss, start

    steppers = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            for key, stepper in steppers.items():  # the one that runs next gets the devices' memory
                if request["do"] in ("build", "steps", "eval", "restart") and key != request["key"]:
                    stepper.park()
            if request["do"] == "build":
                stepper, description = start(Job.from_dict(request["job"]), request.get("budget_steps"))
                steppers[request["key"]] = stepper
                answer = {"compile_s": stepper.run.compile_s, "description": description,
                          "bytes_per_device": stepper.bytes_per_device()}
            elif request["do"] == "steps":
                run = steppers[request["key"]].run
                done = len(run.losses)
                steppers[request["key"]].advance(request["n"])
                answer = {"losses": run.losses[done:], "step_times_s": run.step_times_s[done:],
                          "peak_bytes": allocator_peak()}
            elif request["do"] == "eval":
                answer = {"held_out_loss": held_out_loss(steppers[request["key"]])}
            elif request["do"] == "restart":
                steppers[request["key"]].restart()
                answer = {}
            elif request["do"] == "exit":
                print("{}", file=answers, flush=True)
                return 0
            else:
                raise ValueError(f"unknown request {request['do']!r}")
        except Exception as e:  # a failed build or step is the trial's result, not the server's end
            answer = protocol.error(e)
        print(json.dumps(answer), file=answers, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else batch())
