"""XLA's GPU compiler for the slices' own GPUs, run without a GPU (harness/analysis/gpu_compiler.py), against
the CPU compiler the memory claims use elsewhere: the same plans, technique by technique."""
import json
import os
import subprocess
import sys

import pytest

from harness.analysis import gpu_compiler, memory
from harness.core.config import Setup, model_config
from harness.errors import BadInput
from harness.platform import slices
from harness.platform.hardware import ACCELERATORS, GiB

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # needs the CUDA compiler plugin (a 480 MB download)


def test_every_gpu_of_the_hardware_table_has_a_target_description():
    assert set(gpu_compiler.DATASHEETS) == set(ACCELERATORS)
    t4 = gpu_compiler.target_config("T4")
    assert "cuda_compute_capability { major: 7 minor: 5 }" in t4 and "core_count: 40" in t4
    assert f"device_memory_size: {16 * GiB}" in t4


def test_unknown_compiler_or_gpu_is_named():
    with pytest.raises(BadInput, match="compiler must be one of auto, cpu, gpu, got 'tpu'"):
        gpu_compiler.choose("tpu")
    with pytest.raises(BadInput, match="unknown GPU type 'V100'"):
        gpu_compiler.target_config("V100")


def test_cpu_is_the_cpu_compiler_and_auto_without_a_gpu_too(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine's GPUs: none
    assert gpu_compiler.choose("cpu") is None and gpu_compiler.choose("auto") is None


def test_without_the_plugin_the_memory_command_says_how_to_install_it_before_compiling(tmp_path):
    if gpu_compiler._installed():
        pytest.skip("this environment's JAX has its CUDA plugin: it is never missing here")
    env_dir = tmp_path / "nothing-here"
    proc = subprocess.run([sys.executable, "-m", "harness", "memory", "--compiler", "gpu", "--slice", "UTAH-GPN",
                           "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HARNESS_GPU_COMPILER": str(env_dir)})
    assert proc.returncode != 0 and proc.stdout == ""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "python -m harness.analysis.gpu_compiler install" in lines[0], proc.stderr
    assert "jaxlib" in lines[0] and str(env_dir) in lines[0]


@pytest.mark.parametrize("cuda", ["12", "13"])
def test_a_gpu_machines_own_cuda_plugin_is_the_gpu_compiler(tmp_path, cuda):
    """A GPU machine's JAX carries its CUDA plugin (the lent H100's is CUDA 13's): the GPU compiler
    uses it, with nothing unpacked by `install`."""
    if gpu_compiler._installed():
        pytest.skip("this environment has a CUDA plugin of its own, so the planted one would prove nothing")
    package = tmp_path / "site" / "jax_plugins" / f"xla_cuda{cuda}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    probe = "from harness.analysis import gpu_compiler; print(gpu_compiler._installed(), gpu_compiler.missing())"
    env = {**os.environ, "HARNESS_GPU_COMPILER": str(tmp_path / "nothing-here"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "None"]


needs_plugin = pytest.mark.skipif(gpu_compiler.missing() is not None, reason=str(gpu_compiler.missing()))


@needs_plugin
def test_gpu_compiler_agrees_with_the_cpu_compiler_technique_by_technique():
    """gpt2m on UTAH-GPN's RTX 6000 + T4, all four GPUs: each technique compiled for each VM's own
    GPU needs within a few percent of what the CPU compiler says, and the memory claims' order
    (ZeRO2 least, Pipeshard's first stage most) is the same on both compilers."""
    sl, gpt2m, setup = slices.load("UTAH-GPN"), model_config("gpt2m"), Setup()
    techniques = ("Data", "ZeRO2", "Pipeshard")
    with gpu_compiler.GpuCompiler() as compiler:
        on_gpu = memory.analyse(sl, gpt2m, 4, setup, techniques, compiler=compiler)
        child = compiler._child
    assert child.poll() is not None  # the compiler's process is gone with its context
    on_cpu = memory.analyse(sl, gpt2m, 4, setup, techniques)

    need = {(r["technique"], r["memory"]["source"]): r["memory"]["bytes_per_device"] for r in on_gpu + on_cpu}
    for r in on_gpu:
        assert r["status"] in ("ok", "oom") and r["memory"]["source"] == gpu_compiler.SOURCE, r["reason"]
        ratio = need[r["technique"], gpu_compiler.SOURCE] / need[r["technique"], memory.SOURCE]
        assert 0.85 < ratio < 1.1, (r["technique"], ratio)
    for source in (gpu_compiler.SOURCE, memory.SOURCE):
        assert need["ZeRO2", source] < need["Data", source] < need["Pipeshard", source]
    by_name = {r["technique"]: r["memory"] for r in on_gpu}
    assert len(by_name["Data"]["bytes_per_row"]) == 2  # compiled once for the RTX 6000, once for the T4
    assert len(by_name["Pipeshard"]["bytes_per_stage"]) == 2


@needs_plugin
def test_memory_command_shows_both_compilers_side_by_side():
    proc = subprocess.run([sys.executable, "-m", "harness", "memory", "--model", "scale-small", "--slice", "UTAH-MASS",
                           "--gpus", "4", "--techniques", "Data", "--compiler", "both", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(r["technique"], r["slice"]) for r in doc["comparison"]] == [("Data", "UTAH-MASS")]
    for row in doc["comparison"]:
        assert row["cpu_bytes"] > 0 and row["gpu_bytes"] > 0 and row["gpu_over_cpu"] == row["gpu_bytes"] / row["cpu_bytes"]
    assert {r["memory"]["source"] for r in doc["records"]} == {memory.SOURCE, gpu_compiler.SOURCE}
    assert "cudart_stub" not in proc.stderr  # the plugin's start-up without a driver is not the user's news


@needs_plugin
def test_pipeshard_out_of_memory_at_gpt2ms_trial_batch_is_the_papers_x_only_where_alpas_stage_is_too():
    """gpt2m at its trial batch (2 sequences per GPU, 2 microbatches): the timed Pipeshard step,
    one program for both stages, can need more than an RTX 6000 has (docs/techniques.md), where
    Alpa's stages fit. So on the RTX 6000s of UTAH-MASS its out of memory is a harness error; on
    the T4s of TACC-TACC's second VM alone, Alpa's first stage is over a T4's usable memory too,
    and it is the paper's x."""
    from harness.core.config import Budget
    from harness.runs import records, trials

    class OwnGPUs:  # the facts a cluster of real GPUs, one per device, gives a record
        def facts(self, vms):
            return {"network": {"mechanism": None}}

    _, allocator = records.failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.53GiB"))
    outcome = {}
    for name, vms in (("UTAH-MASS", trials.ALL_VMS), ("TACC-TACC", "vm2")):
        sl = slices.load(name)
        runner = trials.Runner(OwnGPUs(), [sl], Budget(model="gpt2m"), memory_compiler="gpu")
        result = trials.TrialResult(trials.Trial.on(sl, "Pipeshard", vms), info={"bytes_per_device": 29 * GiB})
        outcome[name] = runner.record(result.fail("oom", allocator))
    mass, t4 = outcome["UTAH-MASS"], outcome["TACC-TACC"]
    assert mass["memory"]["papers_program"]["gpus"] == ["RTX6000", "RTX6000"]
    assert mass["memory"]["papers_program"]["source"].startswith("XLA's GPU compiler, Pipeshard as Alpa compiles it")
    first, last = mass["memory"]["papers_program"]["bytes_per_row"]
    assert last < first < ACCELERATORS["RTX6000"].usable_bytes < 29 * GiB
    assert mass["status"] == "error" and "would have run, so this is a harness error" in mass["reason"]
    assert t4["memory"]["papers_program"]["gpus"] == ["T4", "T4"] and t4["status"] == "oom"
    assert t4["memory"]["papers_program"]["bytes_per_row"][0] > ACCELERATORS["T4"].usable_bytes
