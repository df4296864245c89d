"""Paper-scale memory per technique from compile-only XLA analysis, and where it runs out."""
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from harness import records, slices
from harness.config import Setup, model_config
from harness.memory import analyse

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
                                   "alpa_shard": False, "seq_len": None}
    recs = [records.validate(r) for r in doc["records"]]
    assert [r["technique"] for r in recs] == ["Data", "ZeRO2", "Shard", "Pipeshard"]
    for r in recs:
        assert r["cluster"]["slice"] == "UTAH-GPN" and r["cluster"]["vms_used"] == ["vm1", "vm2"]
        assert r["memory"]["bytes_per_device"] > 1e9 and r["memory"]["source"].startswith("xla-cpu")
        assert r["status"] in ("ok", "oom") and r["plan"].startswith(r["technique"])
        if r["status"] == "oom":  # names the VM and GPU that ran out
            assert "vm2's T4 has 16 GiB, 14.4 GiB usable" in r["reason"]


def test_zero2_needs_less_than_data_and_pipeshard_the_most(utah_gpn_4_gpus):
    need = {r["technique"]: r["memory"]["bytes_per_device"] for r in utah_gpn_4_gpus["records"]}
    assert need["ZeRO2"] < need["Data"]
    assert need["Pipeshard"] == max(need.values())
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
    assert remat["memory"]["bytes_per_device"] < kept / 2
    assert "rematerialised" in remat["plan"]


def test_a_plan_that_cannot_be_built_is_a_failed_trial_not_a_crash():
    recs = analyse(slices.load("UTAH-GPN"), model_config("gpt2m"), 4, replace(COMMAND, micro_batches=3),
                   techniques=("Data",))
    assert recs[0]["status"] == "error" and "not divisible by devices x microbatches 12" in recs[0]["reason"]


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
