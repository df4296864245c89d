"""`python -m harness` as a user runs it: help, a training run with --json, and bad input."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from harness import resources
from harness.runs import records
from tests_cpu import slice_files


def harness(*args, **kw):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, **kw)


def test_help_lists_the_subcommands():
    proc = harness("--help")
    assert proc.returncode == 0 and "train" in proc.stdout


def test_train_help_documents_defaults():
    proc = harness("train", "--help")
    assert proc.returncode == 0
    for option in ("--model", "--steps", "--corpus", "--tokenizer", "--json", "scale-small"):
        assert option in proc.stdout


@pytest.mark.slow
@pytest.mark.untimed  # one short training in a subprocess: no link, VM or Ray cluster
def test_train_json_prints_exactly_one_valid_record():
    proc = harness("train", "--model", "scale-tiny", "--steps", "50", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1  # progress went to stderr
    record = records.validate(json.loads(lines[0]))
    assert record["model"]["name"] == "scale-tiny" and record["steps"] == 50 and record["status"] == "ok"
    assert "step 50/50" in proc.stderr


@pytest.mark.slow
@pytest.mark.untimed  # one short training in a subprocess: no link, VM or Ray cluster
@pytest.mark.parametrize("precision, remat", [("bfloat16", True), ("float32-full", False)])
def test_train_precision_and_remat_are_the_models_and_recorded(precision, remat):
    proc = harness("train", "--model", "scale-tiny", "--steps", "3", "--precision", precision,
                   *(["--remat", "--scan-unroll", "2", "--vocab-multiple", "64"] if remat else []), "--json")
    assert proc.returncode == 0, proc.stderr
    record = records.validate(json.loads(proc.stdout))
    assert record["precision"] == precision.removesuffix("-full") and record["status"] == "ok"
    assert record["model"]["remat"] is remat
    assert (record["model"]["scan_unroll"], record["model"]["vocab_multiple"]) == ((2, 64) if remat else (1, 1))
    assert record["throughput"]["peak_arithmetic"] is None  # a CPU: no peak, no MFU


@pytest.mark.slow
@pytest.mark.untimed  # one short training in a subprocess: no link, VM or Ray cluster
def test_a_training_that_diverges_is_recorded_as_failed(tmp_path):
    """At a learning rate of 1e30 the loss is NaN from the second step. JSON has no NaN: writing
    the record once crashed the command and lost it."""
    out = tmp_path / "runs.jsonl"
    proc = harness("train", "--model", "scale-tiny", "--steps", "4", "--lr", "1e30", "--out", str(out), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    [record] = records.read(out)
    assert record == json.loads(proc.stdout)
    assert record["status"] == "error" and record["reason"].startswith("training diverged: the loss of recorded step")
    assert record["steps"] == 4 and None in record["losses"]


def test_mfu_divides_by_the_peak_of_the_arithmetic_that_ran():
    from harness.platform.hardware import accelerator

    h100, t4 = accelerator("H100"), accelerator("T4")
    assert h100.peak_for("float32") == (494.5, "tf32")  # XLA runs float32 matmuls as TF32 on Hopper
    assert h100.peak_for("float32", full_fp32=True) == (67.0, "float32")
    assert h100.peak_for("bfloat16") == (989.0, "bfloat16")
    assert t4.peak_for("float32") == (8.1, "float32")  # Turing has no TF32


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt9"], "unknown model 'gpt9'; expected one of"),
    (["--corpus", "/no/such/corpus"], "corpus path /no/such/corpus does not exist"),
    (["--model", "scale-tiny", "--seq-len", "65"], "seq_len 65 is beyond model scale-tiny's 64 positions"),
    (["--model", "scale-tiny", "--scan-unroll", "0"], "model scale-tiny: scan_unroll must be positive, got 0"),
    (["--tokenizer", "/no/such/dir"], "tokenizer directory /no/such/dir: missing vocab.json"),
    (["--batch-size", "0"], "batch_size must be positive"),
    (["--lr", "nan"], "learning_rate must be a positive number, got nan"),
    (["--lr", "-0.1"], "learning_rate must be a positive number, got -0.1"),
    (["--seed", "-1"], "seed must be >= 0, got -1"),
    (["--epochs", "nan"], "epochs must be a positive number, got nan"),
    (["--peak-tflops", "0"], "--peak-tflops must be a positive number, got 0.0"),
    (["--out", "."], "--out .: is a folder (expected a .jsonl file to append to)"),
])
def test_bad_input_is_one_line_before_any_training(args, message):
    proc = harness("train", *args, "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("harness:")]
    assert errors == [f"harness: error: {errors[0].removeprefix('harness: error: ')}"]
    assert message in errors[0]
    assert "training " not in proc.stderr  # stopped before tokenizing and compiling


@pytest.mark.parametrize("args, message", [
    (["--transfer-s", "nan"], "--transfer-s must be between 0.01 and 600 seconds, got nan"),
    (["--transfer-s", "0"], "--transfer-s must be between 0.01 and 600 seconds, got 0.0"),
    (["--rtt", "-1"], "--rtt must be between 0 and 10000 ms, got -1.0"),
])
def test_emulate_rejects_bad_flags_before_touching_the_network(args, message):
    proc = harness("emulate", *args, "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"harness: error: {message}"


@pytest.mark.slow
@pytest.mark.untimed  # one short training in a subprocess: no link, VM or Ray cluster
def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    """Found out after the run, the record it was meant to keep would be lost."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = harness("train", "--out", str(blocker / "runs.jsonl"), "--json")
    assert proc.returncode == 2 and proc.stdout == "" and "training " not in proc.stderr
    assert proc.stderr.strip() == f"harness: error: --out {blocker / 'runs.jsonl'}: {blocker} is a file, not a folder"
    made = tmp_path / "new" / "runs.jsonl"  # a folder that is not there yet is made
    assert harness("train", "--model", "scale-tiny", "--steps", "3", "--out", str(made), "--json").returncode == 0
    assert records.read(made)[0]["status"] == "ok"


@pytest.mark.parametrize("args, message", [
    (["reproduce", "--threshold", "nan"], "--threshold must be a positive number, got nan"),
    (["reproduce", "--baseline", "/no/such/run"],
     "--baseline /no/such/run: no results.jsonl there (expected a run folder written by reproduce)"),
    (["reproduce", "--beyond", "only", "--beyond-set", "diloco.mix=2"], "beyond: DiLoCo: mix must be in [0, 1], got 2.0"),
    (["reproduce", "--quick", "--beyond", "only", "--beyond-set", "sync_every=8", "--beyond-set", "diloco.fragments=6"],
     "beyond: DiLoCo: 6 fragments of scale-small's 4 layers: a fragment needs a layer at least"),
    (["reproduce", "--beyond", "only", "--beyond-set", "techniques=Data,DiLoCo,Data"],
     "beyond: techniques must name each of Data, ZeRO2, Shard, Pipeshard, DiLoCo at most once, and one at least; "
     "got Data, DiLoCo, Data"),
    (["reproduce", "--beyond-set", "sync_every=8"],
     "--beyond-set: it sets the sweep beyond the paper; give --beyond (or --beyond only) too"),
    (["compare", "--threshold", "-1", "harness/resources/baselines/quick", "harness/resources/baselines/quick"],
     "--threshold must be a positive number, got -1.0"),
    (["predict", "--tokens", "inf"], "--tokens must be a positive number, got inf"),
    (["select", "--margin", "nan"], "--margin must be a number >= 0, got nan"),
    (["select", "--eps", "inf"], "--eps must be a positive number, got inf"),
    (["memory", "--out", "."], "--out .: is a folder (expected a .jsonl file to append to)"),
])
def test_every_subcommand_refuses_bad_numbers_and_paths_in_one_line(args, message):
    """NaN passes a check written as `value <= 0`; each of these once started the run."""
    proc = harness(*args, "--json", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"harness: error: {message}"


def test_a_baseline_whose_records_cannot_be_judged_is_refused_before_the_run(tmp_path):
    """reproduce judges its baseline again at the end (harness.experiments.compare): a baseline
    without the calibration trials its links are worked out from is refused before any run folder."""
    baseline = tmp_path / "baseline"
    shutil.copytree(resources.path("baselines", "quick-similarity"), baseline)
    (baseline / "calibration.jsonl").unlink()
    out = tmp_path / "out"
    proc = harness("reproduce", "--quick", "--baseline", str(baseline), "--out", str(out), "--json", timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"harness: error: --baseline {baseline}: the links its trials ran on cannot be worked "
                                  "out from results.jsonl and calibration.jsonl"), proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("command, option, purpose", [
    ("reproduce", "--slice: ", "the claims compare runs on all of a slice's VMs with runs on one"),
    ("select", "", "Algorithm 1 chooses between all VMs and one of them"),
])
def test_a_slice_of_one_vm_is_refused_where_runs_are_compared_across_vms(tmp_path, command, option, purpose):
    solo = slice_files.write(tmp_path, "SOLO", vms=1, gpus=2)
    proc = harness(command, "--slice", str(solo), "--out", str(tmp_path), "--json", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"harness: error: {option}{solo}: slice SOLO has one VM, and {purpose}: give it two or more"
    assert list(tmp_path.iterdir()) == [solo]  # refused before any run folder


def test_slices_of_other_shapes_are_refused_together_before_the_run(tmp_path):
    """One emulated run serves slices that differ only in their links; this once ran the memory
    claims for 100 s and then failed every trial."""
    three = slice_files.write(tmp_path, "THREE", vms=3, gpus=2)
    proc = harness("reproduce", "--slice", "UTAH-GPN", "--slice", str(three), "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and list(tmp_path.iterdir()) == [three]
    assert proc.stderr.strip() == (f"harness: error: --slice: slice THREE ({three}): one emulated run needs slices with "
                                   "the same VMs and GPUs per VM as UTAH-GPN; run it on its own")


def test_a_forked_helper_that_is_terminated_does_not_tear_down_the_command(tmp_path):
    """pyroute2 forks a helper to open a namespace's socket, then terminates it. The helper inherits
    the command's SIGTERM handler and stack: it must die there, not unwind through the command's
    teardown (which once deleted the namespaces the command was still using)."""
    marker = tmp_path / "torn-down"
    script = f"""
import os, signal, time
from harness import interrupts
interrupts.tear_down_on(signal.SIGTERM, signal.SIGINT)
child = os.fork()
if child == 0:
    try:
        time.sleep(30)
    finally:
        open({str(marker)!r}, "w").close()  # what a teardown in the helper would do
time.sleep(0.5)
os.kill(child, signal.SIGTERM)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(128 + signal.SIGTERM)
    assert not marker.exists()


def test_a_run_started_from_a_test_on_an_xdist_worker_keeps_its_benchmarks(tmp_path):
    """reproduce's pytest is a session of its own. Started from a test on a pytest-xdist worker, it
    once inherited PYTEST_XDIST_WORKER, took itself for that worker, and pytest-benchmark disabled
    its benchmarks and wrote no benchmark.json. reproduce starts it from a process of its own, as here."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_it(benchmark):\n    benchmark(sum, [1])\n")
    out = tmp_path / "benchmark.json"
    start = "import sys\nfrom harness.commands import reproduce\nsys.exit(reproduce._child(sys.argv[1:], sys.stderr))\n"
    proc = subprocess.run([sys.executable, "-c", start, sys.executable, "-m", "pytest", str(probe), "--noconftest",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "--benchmark-json", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [b["name"] for b in json.loads(out.read_text())["benchmarks"]] == ["test_it"]
