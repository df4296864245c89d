"""Regression comparison of a run with a baseline, on hand-made run folders."""
import json
import shutil

from harness import resources
from harness.experiments import compare
from harness.runs import records
from tests_cpu.claim_records import trial

GPN = "UTAH-GPN"
ID = f"C1.two-site/{GPN}/Pipeshard<Data"


def run_folder(tmp_path, name, step_s, outcome="holds", status=None, excused=False, trials_=("Data", "Pipeshard"),
               ids=(ID,)):
    """A run folder whose one part has this outcome, and whose comparisons (by ID) this status."""
    folder = tmp_path / name
    folder.mkdir()
    for r in [trial(t, GPN, [step_s if t == "Data" else 1.0] * 5) for t in trials_]:
        records.append(folder / "results.jsonl", r)
    status = status or ("contradicted" if excused else outcome)
    comparisons = [{"id": i, "status": status, "excuse": {"excused": True} if excused else None} for i in ids]
    entry = {"part": "C1.two-site", "status": comparisons[0]["status"] if comparisons else "not shown",
             "outcome": outcome, "comparisons": comparisons}
    (folder / "claims.json").write_text(json.dumps({"verdicts": [entry]}))
    return folder


def test_compare_flags_a_slowdown_beyond_the_threshold_and_a_worse_verdict(tmp_path):
    base = run_folder(tmp_path, "base", 1.0)
    assert not compare.compare(base, run_folder(tmp_path, "same", 1.3))["regressed"]
    slow = compare.compare(base, run_folder(tmp_path, "slow", 1.6))
    assert slow["regressed"] and slow["slower"] == [f"Data {GPN} vm1+vm2 scale-tiny"]
    worse = compare.compare(base, run_folder(tmp_path, "worse", 1.0, outcome="contradicted"))
    assert worse["worse_verdicts"] == {"C1.two-site": ["holds", "contradicted"]} and worse["regressed"]
    assert worse["worse_comparisons"] == {ID: ["holds", "contradicted"]}
    # Contradicted within a declared limit: reported, not a regression.
    excused = "contradicted within a declared limit"
    flip = compare.compare(base, run_folder(tmp_path, "flip", 1.0, outcome=excused, excused=True))
    assert flip["worse_declared_limits"] == {"C1.two-site": ["holds", excused]} and not flip["regressed"]
    assert flip["excused_comparisons"] == {ID: ["holds", excused]}


def test_compare_reports_a_part_and_a_comparison_slipping_from_holds_to_within_noise(tmp_path):
    """Nothing went against the paper beyond the noise: reported as a slip, not a regression."""
    base = run_folder(tmp_path, "base", 1.0)
    weaker = compare.compare(base, run_folder(tmp_path, "weaker", 1.0, outcome="within noise"))
    assert weaker["weaker_verdicts"] == {"C1.two-site": ["holds", "within noise"]} and not weaker["regressed"]
    assert weaker["weaker_comparisons"] == {ID: ["holds", "within noise"]}
    assert f"comparison {ID}: holds -> within noise (slipped" in compare.summary(weaker)


def test_compare_a_vanished_trial_part_or_comparison_is_a_regression(tmp_path):
    base = run_folder(tmp_path, "base", 1.0)
    gone = compare.compare(base, run_folder(tmp_path, "gone", 1.0, trials_=("Pipeshard",)))
    assert gone["regressed"] and gone["vanished_trials"] == [f"Data {GPN} vm1+vm2 scale-tiny"]
    no_part = run_folder(tmp_path, "no-part", 1.0)
    (no_part / "claims.json").write_text(json.dumps({"verdicts": []}))
    assert compare.compare(base, no_part)["vanished_parts"] == ["C1.two-site"]
    no_comparison = compare.compare(base, run_folder(tmp_path, "no-comparison", 1.0, ids=()))
    assert no_comparison["vanished_comparisons"] == [ID] and no_comparison["regressed"]


def test_a_claims_json_of_before_the_outcomes_is_read_with_its_declared_limits(tmp_path):
    """A run written before outcomes existed had the verdict with and without its declared
    comparisons: contradicted only through them reads as contradicted within a declared limit."""
    old = run_folder(tmp_path, "old", 1.0)
    (old / "claims.json").write_text(json.dumps({"verdicts": [
        {"part": "C1.two-site", "status": "contradicted", "undeclared_status": "holds"}]}))
    assert compare.load(old)[1] == {"C1.two-site": "contradicted within a declared limit"}


def test_the_verdicts_compared_are_those_the_records_give(tmp_path):
    """A run folder's claims.json that says other than its records (stale, or edited) neither
    raises a regression that its records do not show nor hides one: the comparison judges each
    folder's records again, and says where the file differs."""
    base = tmp_path / "base"
    shutil.copytree(resources.path("baselines", "quick-similarity"), base)
    run = tmp_path / "run"
    shutil.copytree(base, run)
    doc = json.loads((run / "claims.json").read_text())
    first = doc["verdicts"][0]
    assert first["part"] == "C1.two-site" and first["outcome"] == "holds"
    first["outcome"] = first["status"] = "contradicted"
    for c in first["comparisons"]:
        c["status"] = "contradicted"
    (run / "claims.json").write_text(json.dumps(doc))
    result = compare.compare(base, run)
    assert not result["regressed"] and not result["worse_verdicts"] and not result["worse_comparisons"], result
    assert result["files_apart_from_records"]["baseline"] == []
    assert "C1.two-site: claims.json says contradicted, today holds" in result["files_apart_from_records"]["run"]
    assert "the run's claims.json or similarity.json says otherwise than its records in " in compare.summary(result)
    # the other way round: the baseline edited to say less than its records still compares by them
    assert not compare.compare(run, base)["regressed"]
