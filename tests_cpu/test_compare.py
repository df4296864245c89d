"""Regression comparison of a run with a baseline, on hand-made run folders."""
import json

from harness import compare, records
from tests_cpu.claim_records import trial

GPN = "UTAH-GPN"


def run_folder(tmp_path, name, step_s, verdict="holds", own=None, trials_=("Data", "Pipeshard")):
    folder = tmp_path / name
    folder.mkdir()
    for r in [trial(t, GPN, [step_s if t == "Data" else 1.0] * 3) for t in trials_]:
        records.append(folder / "results.jsonl", r)
    entry = {"part": "C1.two-site", "status": verdict, "undeclared_status": own or verdict}
    (folder / "claims.json").write_text(json.dumps({"verdicts": [entry]}))
    return folder


def test_compare_flags_a_slowdown_beyond_the_threshold_and_a_worse_verdict(tmp_path):
    base = run_folder(tmp_path, "base", 1.0)
    assert not compare.compare(base, run_folder(tmp_path, "same", 1.3))["regressed"]
    slow = compare.compare(base, run_folder(tmp_path, "slow", 1.6))
    assert slow["regressed"] and slow["slower"] == [f"Data {GPN} vm1+vm2 scale-tiny"]
    worse = compare.compare(base, run_folder(tmp_path, "worse", 1.0, verdict="contradicted"))
    assert worse["worse_verdicts"] == {"C1.two-site": ["holds", "contradicted"]} and worse["regressed"]
    # Worse only through comparisons declared as limits of the backend: reported, not a regression.
    flip = compare.compare(base, run_folder(tmp_path, "flip", 1.0, verdict="contradicted", own="holds"))
    assert flip["worse_declared_limits"] == {"C1.two-site": ["holds", "contradicted"]} and not flip["regressed"]
    # Weaker but nothing beyond the noise: reported, not a regression.
    weaker = compare.compare(base, run_folder(tmp_path, "weaker", 1.0, verdict="within noise"))
    assert weaker["weaker_verdicts"] == {"C1.two-site": ["holds", "within noise"]} and not weaker["regressed"]


def test_compare_a_vanished_trial_or_part_is_a_regression(tmp_path):
    base = run_folder(tmp_path, "base", 1.0)
    gone = compare.compare(base, run_folder(tmp_path, "gone", 1.0, trials_=("Pipeshard",)))
    assert gone["regressed"] and gone["vanished_trials"] == [f"Data {GPN} vm1+vm2 scale-tiny"]
    no_part = run_folder(tmp_path, "no-part", 1.0)
    (no_part / "claims.json").write_text(json.dumps({"verdicts": []}))
    assert compare.compare(base, no_part)["vanished_parts"] == ["C1.two-site"]
