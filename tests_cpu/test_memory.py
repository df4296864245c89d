"""Paper-scale memory per technique from compile-only XLA analysis, and where it runs out."""
import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import jax
import pytest

from harness.analysis.memory import COMPILE_ONLY, analyse
from harness.commands.reproduce import session_env
from harness.core import model, train
from harness.core.config import Setup, TrainConfig, model_config
from harness.platform import slices
from harness.platform.hardware import GiB
from harness.runs import records
from harness.techniques import TECHNIQUES, ClusterShape
from harness.techniques.diloco import NAME as DILOCO
from harness.techniques.pipeshard_stages import in_flight, own_parameters, stage_programs
from harness.techniques.shard_alpa import NAME as ALPA_SHARD
from tests_cpu import slice_files

pytestmark = [pytest.mark.slow, pytest.mark.untimed]  # compiles every technique's programs at paper scale

# The memory command's defaults (Alpa's example), which the fixture below runs with.
COMMAND = Setup(batch_per_gpu=8, remat=False, alpa_shard=False)


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def utah_gpn_4_gpus():
    proc = harness("memory", "--model", "gpt2m", "--slice", "UTAH-GPN", "--gpus", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    return json.loads(proc.stdout)


def test_memory_command_gives_one_record_per_technique(utah_gpn_4_gpus):
    doc = utah_gpn_4_gpus
    assert doc["assumptions"] == {"batch_per_gpu": 8, "micro_batches": 4, "precision": "float32", "remat": False,
                                   "alpa_shard": False, "pipeline_schedule": "1f1b", "seq_len": None}
    recs = [records.validate(r) for r in doc["records"]]
    # every registered technique, the paper's four first
    assert [r["technique"] for r in recs] == list(TECHNIQUES) == ["Data", "ZeRO2", "Shard", "Pipeshard", DILOCO,
                                                                  ALPA_SHARD]
    for r in recs:
        assert r["cluster"]["slice"] == "UTAH-GPN" and r["cluster"]["vms_used"] == ["vm1", "vm2"]
        assert r["memory"]["bytes_per_device"] > 1e9 and r["memory"]["source"].startswith("xla-cpu")
        assert r["status"] in ("ok", "oom") and r["plan"].startswith(r["technique"])
        if r["status"] == "oom":  # names the VM and GPU that ran out
            assert "vm2's T4 has 16 GiB, 14.4 GiB usable" in r["reason"]


def test_zero2_needs_less_than_data(utah_gpn_4_gpus):
    need = {r["technique"]: r["memory"]["bytes_per_device"] for r in utah_gpn_4_gpus["records"]}
    assert need["ZeRO2"] < need["Data"]
    shard = next(r for r in utah_gpn_4_gpus["records"] if r["technique"] == "Shard")
    assert "cheapest by the cost model" in shard["plan"] and "estimated step" in shard["plan"]


def test_verdicts_move_with_precision_and_batch():
    sl, gpt2m = slices.load("UTAH-GPN"), model_config("gpt2m")
    need = {a: analyse(sl, gpt2m, 4, a, techniques=("Data",))[0]["memory"]["bytes_per_device"]
            for a in (COMMAND, replace(COMMAND, precision="float16"), replace(COMMAND, batch_per_gpu=2, micro_batches=2))}
    fp32, fp16, small = need.values()
    assert fp16 < fp32 and small < fp32


def test_rematerialisation_cuts_pipeshards_memory(utah_gpn_4_gpus):
    kept = next(r for r in utah_gpn_4_gpus["records"] if r["technique"] == "Pipeshard")["memory"]["bytes_per_device"]
    remat = analyse(slices.load("UTAH-GPN"), model_config("gpt2m"), 4, replace(COMMAND, remat=True),
                    techniques=("Pipeshard",))[0]
    # The first stage goes from two microbatches' activations kept (1F1B) to one recomputed at a time.
    assert remat["memory"]["bytes_per_device"] < 0.6 * kept
    assert "recomputed one microbatch at a time" in remat["plan"]


def test_pipeshard_is_analysed_per_stage_each_against_its_own_vms_gpus(utah_gpn_4_gpus):
    """Alpa compiles one program per stage (MPMD): stage i's bytes are judged against VM i's GPU."""
    r = next(r for r in utah_gpn_4_gpus["records"] if r["technique"] == "Pipeshard")
    stages = r["memory"]["bytes_per_stage"]
    assert len(stages) == 2 and r["memory"]["bytes_per_device"] == max(stages)
    assert "one program per stage" in r["plan"] and "stage 1: 10 blocks + head" in r["plan"]
    for vm, need in zip(slices.load("UTAH-GPN").vms, stages):
        if need > vm.accelerator.usable_bytes:
            assert f"needs {need / GiB:.1f} GiB per GPU, {vm.name}'s {vm.gpu}" in r["reason"]
        else:
            assert f"{vm.name}'s" not in (r["reason"] or "")


def test_a_stage_holds_only_its_own_parameters_and_the_microbatches_in_flight():
    cfg = model_config("scale-small")
    _, params = model.abstract_init(cfg)
    count = lambda tree: sum(math.prod(x.shape) for x in jax.tree.leaves(tree))
    first, last = (jax.eval_shape(lambda p, s=s: own_parameters(p, cfg, [3, 1], s), params) for s in (0, 1))
    # The blocks are split, nothing is dropped; the tied embedding is on both ends.
    assert count(first["blocks"]) + count(last["blocks"]) == count(params["blocks"])
    assert set(first) == {"blocks", "wte", "wpe"} and set(last) == {"blocks", "ln_f", "wte"}
    # 1F1B keeps n - s microbatches in flight on stage s (at most m), GPipe all m.
    assert [in_flight("1f1b", s, 2, 4) for s in (0, 1)] == [2, 1]
    assert [in_flight("gpipe", s, 2, 4) for s in (0, 1)] == [4, 4]
    assert in_flight("1f1b", 0, 3, 4) == 4  # rounded up to whole groups of microbatches
    # A stage's arguments are its own parameters and Adam's two moments, not the whole model's.
    shape, batch = ClusterShape(2, 2), 16
    train_cfg = TrainConfig(batch_size=batch, steps=1)
    needs = {}
    for schedule in ("1f1b", "gpipe"):
        programs = stage_programs(cfg, shape, batch, cfg.n_positions, 4, schedule)
        needs[schedule] = []
        for p in programs:
            step, args = p.build(shape, train_cfg, 1, batch, cfg.n_positions)
            own = count(args[0])
            assert own < count(params) and count(args[1]) >= 2 * own
            needs[schedule].append(train.needed_bytes(step.lower(*args).compile(COMPILE_ONLY)))
    # GPipe keeps all four microbatches on the first stage, 1F1B two.
    assert needs["gpipe"][0] > needs["1f1b"][0]


def test_a_plan_is_compiled_once_per_process_and_each_record_is_its_own():
    from harness.analysis import memory

    sl, tiny = slices.load("UTAH-MASS"), model_config("scale-tiny")
    first = analyse(sl, tiny, 4, Setup(), techniques=("Data", "Pipeshard"))
    plans = len(memory._COMPILED)
    first[0]["memory"]["bytes_per_device"] = 0
    first[1]["memory"]["bytes_per_stage"].append(0)
    again = analyse(sl, tiny, 4, Setup(), techniques=("Data", "Pipeshard"))
    assert len(memory._COMPILED) == plans  # nothing compiled again
    assert again[0]["memory"]["bytes_per_device"] > 0 and len(again[1]["memory"]["bytes_per_stage"]) == 2
    more = analyse(sl, tiny, 4, replace(Setup(), batch_per_gpu=2 * Setup().batch_per_gpu), techniques=("Data",))
    assert len(memory._COMPILED) == plans + 1 and more[0]["memory"]["bytes_per_device"] > again[0]["memory"]["bytes_per_device"]


@pytest.mark.parametrize("args, message", [
    (["--slice", "NOWHERE"], "slice 'NOWHERE' is neither a Table I slice"),
    (["--model", "gpt9"], "unknown model 'gpt9'"),
    (["--batch-per-gpu", "0"], "--batch-per-gpu must be positive"),
])
def test_memory_bad_input_is_one_line(args, message):
    proc = harness("memory", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].startswith("harness: error: ")
    assert message in proc.stderr


def test_shard_that_no_plan_fits_is_out_of_memory_not_an_error():
    """On UTAH-GPN's T4 VM no Shard plan fits gpt2m at 8 sequences per GPU. The planner runs the
    plan that needs the least and the analysis finds it out of memory, as it does Data there;
    it once failed as if the user had asked for something impossible."""
    on_vm2 = analyse(slices.load("UTAH-GPN"), model_config("gpt2m"), 2, COMMAND, techniques=("Shard",))[1]
    assert on_vm2["cluster"]["vms_used"] == ["vm2"] and on_vm2["status"] == "oom", on_vm2["reason"]
    assert "none fits the device's memory: the one that needs the least" in on_vm2["plan"]
    assert "vm2's T4 has 16 GiB" in on_vm2["reason"] and on_vm2["memory"]["bytes_per_device"] > 16 * GiB


def test_one_vm_at_a_time_on_a_slice_of_three_one_gpu_vms(tmp_path):
    """--gpus names placements, not the paper's counts: one-vm is each VM alone, whatever its GPUs."""
    path = slice_files.write(tmp_path, "three", vms=3, gpus=1)
    proc = harness("memory", "--model", "scale-tiny", "--slice", str(path), "--gpus", "one-vm",
                   "--techniques", "Data", "--json")
    assert proc.returncode == 0, proc.stderr
    recs = json.loads(proc.stdout)["records"]
    assert [r["cluster"]["vms_used"] for r in recs] == [["v0"], ["v1"], ["v2"]]
    assert all(r["cluster"]["hosts"] * r["cluster"]["devices_per_host"] == 1 for r in recs)
    assert "scale-tiny on three, 1 GPU ..." in proc.stderr


def test_a_claims_session_on_a_larger_slice_has_a_cpu_device_for_each_of_its_gpus(tmp_path):
    """The memory claims compile for all of a slice's GPUs at once; Table I's 4 CPU devices (the
    conftest's) once made every analysis on all six GPUs of a three-VM slice crash."""
    path = slice_files.write(tmp_path, "three", vms=3, gpus=2)
    probe = tmp_path / "test_devices.py"
    probe.write_text("import jax\n\n\ndef test_devices():\n    assert len(jax.devices('cpu')) == 6\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe),
                           "--claims-slices", str(path)], capture_output=True, text=True, cwd=tmp_path,
                          env={**session_env(os.environ), "JAX_NUM_CPU_DEVICES": "4"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_slice_of_one_vm_is_analysed_once(tmp_path):
    """All of its GPUs are its one VM's: --gpus both once gave every record twice."""
    path = slice_files.write(tmp_path, "SOLO", vms=1, gpus=2)
    proc = harness("memory", "--model", "scale-tiny", "--slice", str(path), "--techniques", "Data", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["cluster"]["vms_used"] for r in json.loads(proc.stdout)["records"]] == [["v0"]]
