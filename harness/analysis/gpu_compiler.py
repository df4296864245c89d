"""XLA's GPU compiler for the paper's GPUs, without a GPU: per-device bytes as a T4 would need them.

JAX compiles for a GPU it does not have through a compile-only topology
(jax.experimental.topologies.get_topology_desc with platform "cuda", a target description of the
GPU and a topology "1 x VMs x GPUs per VM"): the CUDA plugin's compiler runs buffer assignment,
fusion and its own rematerialisation against that GPU's memory, and the compiled program's memory
analysis is what the GPU would have to hold. Nothing runs, so no CUDA driver or library is needed,
only the plugin's two wheels (jax-cuda12-plugin and jax-cuda12-pjrt, of jaxlib's version; a GPU
machine's own CUDA 12 or 13 plugin serves as well).

The plugin is kept out of the suite's own processes: where it is installed, every JAX process
without a GPU prints a failed CUDA start-up. So `python -m harness.analysis.gpu_compiler install` unpacks it
into a directory of its own, and a child process (`python -m harness.analysis.gpu_compiler_child`, its
backend forced to the CPU, that directory on its path) compiles what the parent asks, one request
at a time over a pipe.

The target descriptions come from the data sheets (DATASHEETS); XLA reads the compute
capability, memory size, SM count, shared memory, L2 and bandwidth from them for its fusion,
scheduling and rematerialisation decisions.
"""
import argparse
import base64
import importlib.util
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import jaxlib

from harness.backends.layout import visible_gpus
from harness.cache import cache_dir
from harness.errors import BadInput
from harness.platform.hardware import accelerator


@dataclass(frozen=True)
class Datasheet:
    compute_capability: tuple[int, int]
    sms: int
    l2_bytes: int
    bandwidth_bytes_s: float
    boost_ghz: float


MiB = 1024**2
DATASHEETS = {  # NVIDIA's data sheets and architecture whitepapers
    "T4": Datasheet((7, 5), 40, 4 * MiB, 320e9, 1.59),
    "RTX6000": Datasheet((7, 5), 72, 6 * MiB, 672e9, 1.77),
    "A30": Datasheet((8, 0), 56, 24 * MiB, 933e9, 1.44),
    "A40": Datasheet((8, 6), 84, 6 * MiB, 696e9, 1.74),
    "A100-40GB": Datasheet((8, 0), 108, 40 * MiB, 1555e9, 1.41),
    "A100-80GB": Datasheet((8, 0), 108, 40 * MiB, 2039e9, 1.41),  # SXM; the PCIe card has 1935e9
    "H100": Datasheet((9, 0), 132, 50 * MiB, 3350e9, 1.98),
    "H100-PCIe": Datasheet((9, 0), 114, 50 * MiB, 2000e9, 1.755),
    "H200": Datasheet((9, 0), 132, 50 * MiB, 4800e9, 1.98),
}
# Per SM, by compute capability: (threads, shared memory, shared memory one block may opt into,
# FP32 units), from CUDA's programming guide.
_SM_LIMITS = {(7, 5): (1024, 64 * 1024, 64 * 1024, 64), (8, 0): (2048, 164 * 1024, 163 * 1024, 64),
              (8, 6): (1536, 100 * 1024, 99 * 1024, 128), (9, 0): (2048, 228 * 1024, 227 * 1024, 128)}
SOURCE = "xla-gpu-memory-analysis (compile only, for the slice's GPUs, no GPU needed)"


def target_config(gpu: str) -> str:
    """The GpuTargetConfig text proto of a GPU of the hardware table."""
    sheet, acc = DATASHEETS.get(gpu), accelerator(gpu)
    if sheet is None:
        raise BadInput(f"GPU {gpu}: no data sheet for the GPU compiler; known: {', '.join(DATASHEETS)}")
    threads, shared, optin, fpus = _SM_LIMITS[sheet.compute_capability]
    major, minor = sheet.compute_capability
    return f"""gpu_device_info {{
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: {shared} shared_memory_per_block_optin: {optin} threads_per_core_limit: {threads}
  core_count: {sheet.sms} fpus_per_core: {fpus}
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
  memory_bandwidth: {int(sheet.bandwidth_bytes_s)} l2_cache_size: {sheet.l2_bytes}
  clock_rate_ghz: {sheet.boost_ghz} device_memory_size: {acc.memory_bytes}
  cuda_compute_capability {{ major: {major} minor: {minor} }}
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
runtime_version {{ major: 12 minor: 8 }}
device_description_str: "{gpu}"
"""


def plugin_dir() -> Path:
    """Where the plugin's wheels are unpacked when the environment itself does not have them."""
    return Path(os.environ["HARNESS_GPU_COMPILER"]) if os.environ.get("HARNESS_GPU_COMPILER") \
        else cache_dir("gpu-compiler")


# JAX's CUDA plugins by CUDA major version; either registers the "cuda" platform the topology needs.
_PLUGINS = ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")


def _installed() -> bool:
    """Whether this environment itself has a CUDA plugin (a GPU machine's JAX does, for CUDA 12 or 13)."""
    try:
        return any(importlib.util.find_spec(name) is not None for name in _PLUGINS)
    except ModuleNotFoundError:  # no jax_plugins namespace at all
        return False


def missing() -> str | None:
    """Why the GPU compiler cannot run here, or None."""
    if _installed():
        return None

    found = sorted(p.name for p in plugin_dir().glob("jax_cuda12_plugin-*.dist-info"))
    if found != [f"jax_cuda12_plugin-{jaxlib.__version__}.dist-info"]:
        what = f"found {', '.join(found)}" if found else "not installed"
        return (f"the GPU compiler needs JAX's CUDA plugin of jaxlib {jaxlib.__version__} ({what} in "
                f"{plugin_dir()}): python -m harness.analysis.gpu_compiler install")
    return None


COMPILERS = ("auto", "cpu", "gpu")


def choose(compiler: str):
    """A GpuCompiler for "gpu", None (XLA's CPU compiler) for "cpu"; "auto" is "gpu" on a machine
    with a GPU and the plugin (a GPU machine's JAX has it), "cpu" elsewhere: the CPU compiler is
    four to seven times faster, and within a few percent (tests_cpu/test_gpu_compiler.py)."""
    if compiler not in COMPILERS:
        raise BadInput(f"compiler must be one of {', '.join(COMPILERS)}, got {compiler!r}")
    if compiler == "auto":
        compiler = "gpu" if visible_gpus() and missing() is None else "cpu"
    return GpuCompiler() if compiler == "gpu" else None


class GpuCompiler:
    """A child process that compiles for GPUs it does not have; use as a context manager."""

    def __init__(self):
        why = missing()
        if why:
            raise BadInput(why)
        env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
        if not _installed():
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_dir()), env.get("PYTHONPATH")]))
        self._child = subprocess.Popen([sys.executable, "-m", "harness.analysis.gpu_compiler_child"], env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threading.Thread(target=_forward_stderr, args=(self._child.stderr,), daemon=True).start()
        self.compiled: dict = {}  # memory.analyse's results from this compiler, by plan

    def compiled_bytes(self, tech, model_cfg, shape, a, row_gpus: list[str]) -> dict:
        """memory.compiled_bytes, compiled for row_gpus[i] on mesh row i (a VM, or a stage)."""
        self._child.stdin.write(encode((tech, model_cfg, shape, a, row_gpus)) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the GPU compiler's process ended (exit status {self._child.wait()})")
        ok, value = decode(line)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# The CUDA plugin's start-up, without a driver, says so at INFO level before logging is set up.
_NOISE = ("cudart_stub.cc", "All log messages before absl::InitializeLog()")


def _forward_stderr(stream) -> None:
    for line in stream:
        if not any(n in line for n in _NOISE):
            sys.stderr.write(line)


def encode(obj) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode()


def decode(line: str):
    return pickle.loads(base64.b64decode(line))


def install() -> int:
    """Unpack the plugin's wheels, of jaxlib's version, where missing() looks (from the registry)."""
    if _installed():
        print("this environment's JAX has its CUDA plugin already", file=sys.stderr)
        return 0

    v = jaxlib.__version__
    return subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
                           "--target", str(plugin_dir()), f"jax-cuda12-plugin=={v}", f"jax-cuda12-pjrt=={v}"]).returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.analysis.gpu_compiler", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["install", "check"],
                   help=f"install: JAX's CUDA plugin into {plugin_dir()} ($HARNESS_GPU_COMPILER); check: say whether "
                        "the GPU compiler can run here")
    args = p.parse_args(argv)
    if args.action == "install":
        return install()
    why = missing()
    print(why or "the GPU compiler can run here", file=sys.stderr)
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
