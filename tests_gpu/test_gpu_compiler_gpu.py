"""XLA's GPU compiler without a GPU (harness/analysis/gpu_compiler.py) against the GPU that is here: the data
sheet it compiles for is this GPU's, and the bytes it forecasts for a step are the bytes this GPU's
own compile of that step asks for and what its allocator hands out when the step runs. The figures
go into the JUnit XML as properties (tests_gpu/device_run.sh writes it)."""
import json
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from harness.analysis import gpu_compiler
from harness.core.config import Setup, model_config
from harness.platform import hardware
from harness.techniques import ClusterShape, technique

ROOT = Path(__file__).resolve().parents[1]
MODEL, SETUP, ONE = "gpt2m", Setup(), ClusterShape(1, 1)  # the memory claims' model and setup, on one GPU


def this_gpu() -> str:
    kind = jax.devices("gpu")[0].device_kind
    acc = hardware.identify(kind)
    if acc is None:
        pytest.skip(f"{kind}: not in harness/platform/hardware.py's table, so there is no data sheet to check")
    return acc.name


def data_technique():
    return technique("Data", micro_batches=SETUP.micro_batches, combine=False)


def test_the_data_sheet_is_this_gpus(record_property):
    device, sheet = jax.devices("gpu")[0], gpu_compiler.DATASHEETS[this_gpu()]
    capability, sms = getattr(device, "compute_capability", None), getattr(device, "core_count", None)
    if capability is None or sms is None:
        pytest.skip(f"JAX {jax.__version__}'s GPU device does not say its compute capability and SM count")
    record_property("device", f"{device.device_kind}: compute capability {capability}, {sms} SMs")
    assert tuple(int(x) for x in str(capability).split(".")) == sheet.compute_capability
    assert int(sms) == sheet.sms


def test_the_forecast_is_this_gpus_own_compile_and_allocation(record_property):
    gpu = this_gpu()
    if gpu_compiler.missing():
        pytest.skip(gpu_compiler.missing())
    model_cfg = model_config(MODEL)
    with gpu_compiler.GpuCompiler() as compiler:
        forecast = compiler.compiled_bytes(data_technique(), model_cfg, ONE, SETUP, [gpu])["bytes_per_device"]
    # A process of its own, so that its allocator's peak is this step's and no earlier test's.
    proc = subprocess.run([sys.executable, "-m", "tests_gpu.test_gpu_compiler_gpu"], cwd=ROOT,
                          capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-3000:]
    here = json.loads(proc.stdout.splitlines()[-1])
    assert here["compiled_bytes"] and here["peak_bytes_in_use"], f"this GPU gave no memory figures: {here}"
    for name, value in {"forecast_bytes": forecast, **here}.items():
        record_property(name, value)
    summary = (f"{MODEL}, {SETUP.batch_per_gpu} sequences, {SETUP.precision}, on one {gpu}: forecast without a GPU "
               f"{forecast / 2**30:.2f} GiB, this GPU's compile {here['compiled_bytes'] / 2**30:.2f} GiB, "
               f"its allocator's peak {here['peak_bytes_in_use'] / 2**30:.2f} GiB")
    print(summary)
    # The same compiler and program: only autotuning's choices, which need the GPU, may differ.
    assert 0.95 < forecast / here["compiled_bytes"] < 1.05, summary
    # What runs: the step's buffers, plus the batch waiting for the next step and the allocator's rounding.
    assert 0.9 < here["peak_bytes_in_use"] / forecast < 1.15, summary


def _run_here() -> dict:
    """Build the plan on this GPU, take its compiled bytes, run three steps, read the allocator's peak."""
    from harness.core import data, train
    from harness.core.config import TrainConfig

    model_cfg = model_config(MODEL)
    batch = SETUP.batch_per_gpu * ONE.n_devices
    cfg = TrainConfig(batch_size=batch, seq_len=model_cfg.n_positions, steps=3)
    packed = data.prepare(model_cfg.vocab_size, model_cfg.n_positions, batch)
    plan = data_technique().build(model_cfg, ONE, cfg, 3, devices=jax.devices("gpu")[:1])
    stepper = train.plan_stepper(plan, model_cfg, cfg, packed, train.TrainRun(3))
    stepper.advance(3)
    stats = jax.devices("gpu")[0].memory_stats() or {}
    return {"compiled_bytes": stepper.bytes_per_device(), "peak_bytes_in_use": stats.get("peak_bytes_in_use")}


if __name__ == "__main__":
    print(json.dumps(_run_here()))
