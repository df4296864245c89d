"""`python -m harness select` end to end: Algorithm 1 over real trials on an emulated slice."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import records
from harness.cli import main
from harness.emulation import netns
from leaks import back_to, leftovers


def test_select_runs_the_trials_it_needs_records_each_and_decides(tmp_path):
    problem = netns.missing_privileges()
    if problem:
        pytest.skip(f"cannot emulate slices here: {problem}")
    before = leftovers()
    out = subprocess.run([sys.executable, "-m", "harness", "select", "--slice", "TACC-TACC", "--model", "scale-tiny",
                          "--out", str(tmp_path), "--planner", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    recs = records.read(Path(doc["report_dir"]) / "results.jsonl")
    ran = {(r["technique"], tuple(r["cluster"]["vms_used"])) for r in recs}
    # both modes decided from one set of trials; each trial trained and was recorded once
    assert [d["mode"] for d in doc["decisions"]] == ["published", "corrected"]
    assert len(recs) == len(ran) == len(doc["trials"])
    assert ("Pipeshard", ("vm1", "vm2")) in ran and all(r["status"] == "ok" and len(r["losses"]) == 3 for r in recs)
    for d in doc["decisions"]:
        measured = [(x["technique"], tuple(x["vms"])) for x in d["trials"] if not x.get("skipped")]
        assert set(measured) <= ran
        assert d["technique"] is not None and (d["technique"], tuple(d["vms"])) in ran
    # the emulated VMs are identical: the planner can only skip a technique, never a VM
    assert doc["planner"] == {"on": True, "margin": 0.3, "trials_saved": doc["planner"]["trials_saved"]}
    assert json.loads((Path(doc["report_dir"]) / "selection.json").read_text())["decisions"] == doc["decisions"]
    assert back_to(before) == before


@pytest.mark.parametrize("args, field", [(["--delta", "0"], "--delta"), (["--steps", "2"], "--steps"),
                                         (["--slice", "nowhere"], "slice 'nowhere'"), (["--eps", "-1"], "--eps"),
                                         (["--margin", "-1"], "--margin")])
def test_select_names_bad_input_before_starting_anything(args, field, capsys):
    assert main(["select", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err
