"""What one gloo all-reduce between VMs costs on a link: the collective Data runs on its gradients,
alone, without a model around it.

    python -m harness.backends.collective      one VM's process (worker.environment() set, one device):
                                              reads "NBYTES[,NBYTES...] REPEATS [flat]" lines,
                                              all-reduces tensors of those sizes (float32) across the
                                              processes REPEATS times, one collective per tensor, or
                                              with `flat` concatenated into one; answers
                                              {"seconds": [...], "correct": bool} per line; "exit" ends it

    with AllReduce(net) as reduce:            one such process in each VM of an emulated network
        net.set_rtt(57.4)
        reduce.seconds(17 * 2**20, repeats=3)  # each VM's times, once every VM has answered
        reduce.seconds([4 * 2**20] * 4, repeats=3, flat=True)

One collective per tensor is what XLA's CPU runtime does even with a combined all-reduce (it runs
the operands one by one, each a gloo ring paying its round trips); one over the concatenation is
what XLA's GPU combiner and NCCL's grouped call amount to.
"""
import json
import os
import subprocess
import sys
import time

COORDINATOR_PORT = 7301


def serve() -> int:
    # deferred: only a VM's process loads it, once init_distributed has set JAX up
    from harness.backends.worker import init_distributed

    answers = os.fdopen(os.dup(1), "w")  # the answers alone on stdout; any library's output to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    init_distributed()
    # deferred: only a VM's process loads it, once init_distributed has set JAX up
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = jax.process_count()
    mesh = jax.make_mesh((n,), ("vm",), devices=jax.devices())

    def per_tensor(*xs):
        return tuple(jax.lax.psum(x, "vm") for x in xs)

    def flat(*xs):
        summed = jax.lax.psum(jnp.concatenate(xs, axis=1), "vm")
        return tuple(jnp.split(summed, np.cumsum([x.shape[1] for x in xs])[:-1], axis=1))

    compiled = {}
    for line in sys.stdin:
        if line.strip() == "exit":
            break
        sizes, repeats, *mode = line.split()
        counts = tuple(int(b) // 4 for b in sizes.split(","))
        xs = [jax.make_array_from_process_local_data(NamedSharding(mesh, P("vm")),
                                                     np.full((1, c), jax.process_index() + 1, np.float32), (n, c))
              for c in counts]
        key = (counts, tuple(mode))
        if key not in compiled:  # compile and connect outside the timed repeats
            specs = tuple(P("vm") for _ in counts)
            compiled[key] = jax.jit(jax.shard_map(flat if mode == ["flat"] else per_tensor, mesh=mesh,
                                                  in_specs=specs, out_specs=specs))
            jax.block_until_ready(compiled[key](*xs))
        times = []
        for _ in range(int(repeats)):
            start = time.perf_counter()
            out = jax.block_until_ready(compiled[key](*xs))
            times.append(time.perf_counter() - start)
        correct = all(bool(jnp.all(o.addressable_shards[0].data == n * (n + 1) / 2)) for o in out)
        print(json.dumps({"seconds": times, "correct": correct}), file=answers, flush=True)
    jax.distributed.shutdown()
    return 0


class AllReduce:
    """One collective process per VM of an emulated network, kept up across changes of the link."""

    def __init__(self, net):
        # deferred: only a VM's process loads it, once init_distributed has set JAX up
        from harness.backends.worker import environment

        self.net = net
        vms = list(net.netns)
        coordinator = f"{net.address[vms[0]]}:{COORDINATOR_PORT}"
        self.procs = [net.popen(vm, ["env", *(f"{k}={v}" for k, v in environment(coordinator, len(vms), i, 1).items()),
                                     sys.executable, "-m", "harness.backends.collective"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
                      for i, vm in enumerate(vms)]

    def __enter__(self) -> "AllReduce":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def seconds(self, nbytes: int | list[int], repeats: int, flat: bool = False) -> list[list[float]]:
        """Each VM's time for each of `repeats` all-reduces of nbytes (float32), or of tensors of
        those sizes: one collective each, or (flat) one over their concatenation."""
        sizes = ",".join(str(b) for b in (nbytes if isinstance(nbytes, list) else [nbytes]))
        for p in self.procs:
            p.stdin.write(f"{sizes} {repeats}{' flat' if flat else ''}\n")
            p.stdin.flush()
        answers = []
        for p in self.procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a collective process ended (exit status {p.wait()})")
            answers.append(json.loads(line))
        if not all(a["correct"] for a in answers):
            raise RuntimeError("the all-reduce gave a wrong sum")
        return [a["seconds"] for a in answers]

    def close(self) -> None:
        """Every process is told first, then waited for: jax.distributed's shutdown waits for all."""
        for p in self.procs:
            try:
                p.stdin.write("exit\n")
                p.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + 30
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(serve())
