"""The GPU compiler's child process (gpu_compiler.GpuCompiler starts it): it compiles each plan
the parent sends for the GPUs named, with JAX's CUDA plugin on its path and its backend forced to
the CPU, and answers with memory.compiled_bytes or the exception, one line each over a pipe."""
import sys

import jax
from jax.experimental import topologies

from harness.analysis import memory
from harness.analysis.gpu_compiler import decode, encode, target_config


def compile_only_devices(gpu: str, hosts: int, per_host: int) -> list:
    topology = topologies.get_topology_desc(platform="cuda", target_config=target_config(gpu),
                                            topology=f"1x{hosts}x{per_host}")
    return list(topology.devices)


def serve() -> None:
    """Answer each request line with (True, result) or (False, the exception)."""
    jax.config.update("jax_platforms", "cpu")
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    for line in sys.stdin:
        tech, model_cfg, shape, a, row_gpus = decode(line)
        try:
            answer = True, memory.compiled_bytes(tech, model_cfg, shape, a, row_gpus=row_gpus,
                                                 devices_for=compile_only_devices)
        except Exception as e:  # the parent records it as the trial's failure
            answer = False, RuntimeError(f"{type(e).__name__}: {e}".splitlines()[0])
        out.write(encode(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
