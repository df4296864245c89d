"""`python -m harness reproduce` interrupted in the middle: the trial is recorded, nothing is left."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runs import records
from harness.runs.run_config import RunConfig
from harness.suite.privileges import require_emulation
from tests_cpu.leaks import back_to, interruptible, leftovers, stopped_at_exit

pytestmark = pytest.mark.slow  # runs reproduce on emulated slices


def test_ctrl_c_in_the_middle_records_the_trial_and_leaves_nothing_behind(tmp_path):
    require_emulation()
    before = leftovers()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "reproduce", "--quick", "--model", "scale-tiny",
                             "--out", str(tmp_path), "--json"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "stderr.log", "w"), text=True, preexec_fn=interruptible)
    with stopped_at_exit(proc):
        deadline = time.monotonic() + 300
        while leftovers()["workers"] <= before["workers"]:  # the first trial's workers are up: mid-run
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()[-2000:]
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, (tmp_path / "stderr.log").read_text()[-2000:]
    doc = json.loads(out)  # still exactly one JSON document
    # The first trials are the calibration trials of similarity scaling (calibration.jsonl), then
    # the sweep's (results.jsonl): the one interrupted is the last of whichever file has one.
    files = [Path(doc["report_dir"]) / name for name in ("results.jsonl", "calibration.jsonl")]
    last = [records.read(f)[-1] for f in files if f.is_file()]
    assert ("error", "interrupted by the user") in [(r["status"], r["reason"]) for r in last], last
    # What the run was set by is in its report, and is the file pytest read.
    ran = RunConfig.load(Path(doc["report_dir"]) / "run.toml")
    assert (ran.slices, ran.model, ran.report_dir) == ("quick", "scale-tiny", doc["report_dir"])
    assert back_to(before) == before


def test_a_run_stopped_before_any_claim_does_not_point_at_a_report():
    from harness.commands import reproduce

    stopped = {"run_id": "r", "report_dir": "reports/r", "pytest_exit_status": 130, "wall_s": 78.5,
               "files": [".benchmarks", "calibration.jsonl"], "verdicts": []}
    assert reproduce.summary(stopped) == ("run r interrupted after 78 s without a report; "
                                          "what it recorded is in reports/r/ (calibration.jsonl)")
    finished = {**stopped, "pytest_exit_status": 1, "files": ["claims.md", "results.jsonl"]}
    assert reproduce.summary(finished) == "run r: 78 s, report in reports/r/claims.md"
    only = {**stopped, "pytest_exit_status": 0, "files": ["beyond.json", "beyond.md"],
            "beyond": [{"part": "B1.crossover", "status": "holds"}]}
    assert reproduce.summary(only).splitlines() == ["run r: 78 s, report in reports/r/beyond.md",
                                                    "  B1.crossover       holds (beyond the paper)"]
