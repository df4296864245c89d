"""`python -m harness select`: bad input, and Ctrl-C in the middle of its trials.

Its decisions over real trials are tested on the claims' cluster (test_claims.py), through the
same code the command runs once it has brought its own emulated slice up.
"""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import records
from harness.cli import main
from harness.emulation import netns
from leaks import back_to, leftovers


@pytest.mark.parametrize("args, field", [(["--delta", "0"], "--delta"), (["--steps", "2"], "--steps"),
                                         (["--slice", "nowhere"], "slice 'nowhere'"), (["--eps", "-1"], "--eps"),
                                         (["--margin", "-1"], "--margin")])
def test_select_names_bad_input_before_starting_anything(args, field, capsys):
    assert main(["select", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err


def test_ctrl_c_in_select_records_the_interrupted_trial_and_leaves_nothing_behind(tmp_path):
    problem = netns.missing_privileges()
    if problem:
        pytest.skip(f"cannot emulate slices here: {problem}")
    before = leftovers()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "select", "--slice", "TACC-TACC", "--model", "scale-tiny",
                             "--out", str(tmp_path), "--json"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "stderr.log", "w"), text=True)
    deadline = time.monotonic() + 300
    while leftovers()["workers"] <= before["workers"]:  # the first trial's workers are up: mid-run
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()[-2000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, (tmp_path / "stderr.log").read_text()[-2000:]
    doc = json.loads(out)  # still exactly one JSON document
    assert doc["interrupted"] and doc["decisions"] == []
    recs = records.read(Path(doc["report_dir"]) / "results.jsonl")
    assert (recs[-1]["status"], recs[-1]["reason"]) == ("error", "interrupted by the user")
    assert back_to(before) == before
