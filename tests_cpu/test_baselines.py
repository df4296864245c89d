"""The shipped baselines say what today's code says of their records: each is judged again from
its folder alone (harness.experiments.rejudge), part by part and comparison by comparison."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import resources
from harness.experiments import rejudge, report
from harness.paper import claims
from harness.runs import records

BASELINES = sorted(p for p in resources.path("baselines").iterdir() if (p / "results.jsonl").is_file())
ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# What lent machines measured, kept in the repository beside the shipped baselines.
RECORDED = sorted(p for p in (ROOT / "reports" / "baselines").iterdir() if (p / "claims.json").is_file())


@pytest.mark.parametrize("folder", BASELINES + RECORDED, ids=lambda p: p.name)
def test_a_shipped_baseline_is_what_todays_code_judges_of_its_records(folder):
    assert rejudge.differences(folder) == []


@pytest.mark.parametrize("folder", BASELINES + RECORDED, ids=lambda p: p.name)
def test_a_shipped_runs_claims_md_states_the_drift_its_records_give(folder):
    """Every trial's ± is at least the run's drift (claims.drift): the report says how much, from
    the records, so that a reader sees why a difference that size is within noise."""
    drift = claims.Table([r for r in records.read(rejudge.results_file(folder)) if not rejudge.is_memory(r)]).drift
    said = re.findall(r"moved apart by ([0-9.]+)% of a step", (folder / "claims.md").read_text())
    assert said == ([f"{100 * drift:.1f}"] if drift else [])


def test_a_doctored_baseline_is_judged_anew(tmp_path):
    """The check can fail: Pipeshard made three times slower on UTAH-GPN in a copy of the
    default baseline, every field that follows from its step times with them, and its claims.json
    no longer says what its records show."""
    folder = tmp_path / "doctored"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    recs = records.read(folder / "results.jsonl")
    for r in recs:
        if (r["technique"] == "Pipeshard" and r["cluster"]["slice"] == "UTAH-GPN" and len(r["cluster"]["vms_used"]) > 1
                and not rejudge.is_memory(r)):
            r["timing"]["step_times_s"] = [3 * t for t in r["timing"]["step_times_s"]]
            r["timing"]["median_step_s"] *= 3
            r["timing"]["epoch_time_s"] *= 3
            r["throughput"] = {k: v / 3 if k.startswith("tflops_") else v for k, v in r["throughput"].items()}
    (folder / "results.jsonl").write_text("".join(records.dumps(r) + "\n" for r in recs))
    assert any(d.startswith("C1.two-site: claims.json says holds, today contradicted") for d in rejudge.differences(folder))


def test_similarity_groups_are_compared_by_slice_technique_and_group_not_by_position(tmp_path):
    folder = tmp_path / "reordered"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    doc = json.loads((folder / "similarity.json").read_text())
    assert len(doc["misses"]) >= 2, "the default baseline has groups beyond the tolerance to reorder"
    doc["misses"].reverse()
    (folder / "similarity.json").write_text(json.dumps(doc))
    assert rejudge.differences(folder) == []
    gone = doc["misses"].pop()
    (folder / "similarity.json").write_text(json.dumps(doc))
    said = f"similarity {gone['slice']} {gone['technique']} {gone['group']}: similarity.json has it within the tolerance"
    assert any(d.startswith(said) for d in rejudge.differences(folder)), rejudge.differences(folder)


def _copy(tmp_path, name="quick-similarity") -> Path:
    folder = tmp_path / name
    shutil.copytree(resources.path("baselines", name), folder)
    return folder


def _said(verdicts) -> list:
    """Each part's outcome and each comparison's status and excuse, as judging gives them."""
    return [(v["part"], v["outcome"], [(c["id"], c["status"], c["excuse"]) for c in v["comparisons"]])
            for v in (v.to_dict() for v in verdicts)]


def test_a_doctored_links_figure_moves_no_verdict_and_is_named(tmp_path):
    """similarity.json's groups are what C1.single-site's declared limit reads: read as written, a
    Pipeshard whose overheads were written down to nothing on TACC-TACC would leave its
    contradictions there unexcused, and a tolerance written up would hide every group beyond it.
    judge works them out from the records instead, so nothing moves, and names each figure."""
    folder = _copy(tmp_path)
    before = _said(rejudge.judge(folder))
    assert any(part == "C1.single-site" and any(excuse and excuse["excused"] for _, _, excuse in cs)
               for part, _, cs in before), "the baseline has C1.single-site excused, which the doctoring would undo"
    doc = json.loads((folder / "similarity.json").read_text())
    tacc = next(s for s in doc["slices"] if s["slice"] == "TACC-TACC")
    tacc["model"]["Pipeshard"] = {"latency": 1e-4, "bandwidth": 1e-4, "bubble": 1e-4}
    doc["tolerance"] = 100.0
    (folder / "similarity.json").write_text(json.dumps(doc))
    assert _said(rejudge.judge(folder)) == before
    apart = rejudge.differences(folder)
    assert "similarity.json: tolerance is 100, the records give 2" in apart, apart
    assert any(d.startswith("similarity.json: slices[TACC-TACC].model.Pipeshard.bandwidth is 0.0001, the records give ")
               for d in apart), apart
    assert not any(d.startswith("similarity ") and "within the tolerance" in d for d in apart), apart


def _refused(folder: Path, recs: list[dict], message: str) -> None:
    """The folder's results.jsonl, rewritten as recs, is refused by judging in one line matching message."""
    from harness.errors import BadInput

    rejudge.results_file(folder).write_text("".join(records.dumps(r) + "\n" for r in recs))
    with pytest.raises(BadInput, match=message) as e:
        rejudge.judge(folder)
    assert "\n" not in str(e.value)


def _calibration(folder: Path, doctor) -> None:
    path = folder / "calibration.jsonl"
    recs = records.read(path)
    doctor(recs)
    path.write_text("".join(records.dumps(r) + "\n" for r in recs))


def _fail(recs, i):
    recs[i]["status"], recs[i]["reason"] = "error", "doctored"


@pytest.mark.parametrize("doctor, message", [
    (lambda recs: recs.clear(), "ValueError a run on similarity-scaled links has at least 4 calibration trials, got 0"),
    (lambda recs: recs.extend([recs[-1], recs[-1]]),
     "calibration trial 7 (Data on 2 VMs of UTAH-GPN, ok): a run refines only a two-site slice's link, at most 2 times"),
    (lambda recs: recs.append(recs[0]),
     "calibration trial 6 (Data on 1 VMs of TACC-TACC, ok): a run refines only a two-site slice's link"),
    (lambda recs: recs.insert(1, recs.pop(2)),
     "calibration trial 2 (Shard on 2 VMs of TACC-TACC, ok): a run's is ZeRO2 on 2 VMs of TACC-TACC, ok"),
    (lambda recs: _fail(recs, 3), "calibration trial 4 (Data on 2 VMs of TACC-TACC, error): a run's is Data on 2 VMs"),
    (lambda recs: recs[1]["model"].update(n_embd=512), "MixedRecords the trial ZeRO2 on TACC-TACC vm1+vm2 (record_id "),
], ids=["none", "a-third-refinement", "a-single-site-refined", "reordered", "one-failed", "another-model"])
def test_calibration_trials_no_run_makes_are_refused_in_one_line(tmp_path, doctor, message):
    """The links of a run on similarity-scaled links are worked out from its calibration trials:
    trials that are not those a run makes, in its order (calibration.apply), are refused, naming
    the trial, before anything is judged."""
    from harness.errors import BadInput

    folder = _copy(tmp_path)
    _calibration(folder, doctor)
    with pytest.raises(BadInput, match=re.escape(message)) as e:
        rejudge.judge(folder)
    assert "\n" not in str(e.value) and "cannot be worked out from results.jsonl and calibration.jsonl" in str(e.value)


@pytest.mark.parametrize("scaled_to, set_to, said", [
    (None, 0.1, "similarity link vm1>vm2 set to 0.1 Gbit/s where its scaling sets None Gbit/s"),
    (0.1, "gone", "similarity link vm1>vm2 set to None Gbit/s where its scaling sets 0.1 Gbit/s"),
], ids=["a-rate-in-one-direction", "links-gone-where-scaled-to-a-rate"])
def test_a_trial_whose_link_was_set_to_another_rate_than_it_was_scaled_to_is_refused_in_one_line(tmp_path, scaled_to,
                                                                                                   set_to, said):
    """A record names its link twice: the scaling (what the groups are read from) and each
    direction's settings (what the cost model's check prices the trial on). A rate doctored into
    one direction of an unshaped scaled link would price that trial shaped beside unshaped groups;
    a trial across VMs whose links are gone is priced on no rate. Every other trial on the slice
    is left as a run on that link writes it, so only the doctored one can be refused."""
    folder = _copy(tmp_path)
    path = folder / "results.jsonl"
    recs = records.read(path)
    on_utah = [r for r in recs if r["cluster"]["slice"] == "UTAH-GPN" and "scaling" in r["cluster"]["network"]]
    assert on_utah[0]["cluster"]["network"]["scaling"]["bandwidth_gbps"] is None  # the baseline's link is unshaped
    for r in on_utah:
        r["cluster"]["network"]["scaling"]["bandwidth_gbps"] = scaled_to
        for direction in (r["cluster"]["network"].get("links") or {}).values():
            direction["bandwidth_gbps"] = scaled_to
    network = next(r for r in on_utah if r["cluster"]["hosts"] == 2)["cluster"]["network"]
    if set_to == "gone":
        del network["links"]
    else:
        network["links"]["vm1>vm2"]["bandwidth_gbps"] = set_to
    _refused(folder, recs, re.escape(f"a trial on UTAH-GPN names its {said}; a run sets every direction "
                                     "to the rate its link was made with"))


def test_a_literal_trial_whose_link_was_set_to_another_rate_than_its_slices_is_refused_in_one_line(tmp_path):
    """On literal links the groups and the declared limits' figures are worked out from the trials'
    own links: a rate doctored into them would move those figures with no trial run on it."""
    folder = tmp_path / "literal"
    shutil.copytree(ROOT / "reports" / "baselines" / "alpa-shard-quick-literal-2026-11-27", folder)
    path = rejudge.results_file(folder)
    recs = records.read(path)
    across = [r for r in recs if r["cluster"]["slice"] == "UTAH-GPN" and r["cluster"]["network"].get("links")]
    assert across and across[0]["cluster"]["network"]["scaling"]["mode"] == "literal"
    for r in across:
        for direction in r["cluster"]["network"]["links"].values():
            direction["bandwidth_gbps"] = 0.05
    _refused(folder, recs, re.escape("a trial on UTAH-GPN names its literal link vm1>vm2 set to 0.05 "
                                     "Gbit/s where its scaling sets None Gbit/s"))


def _doctor_vms(r):
    r["cluster"]["vms_used"] = [*r["cluster"]["vms_used"], "vm3"]


def _doctor_epoch(r, global_batch=None, blocks=None):
    """Another batch or corpus, with every field derived from it made to follow (a longer epoch
    to time the same step over)."""
    r["batch"]["global_batch"] = global_batch or r["batch"]["global_batch"]
    r["data"]["blocks"] = blocks or r["data"]["blocks"]
    r["tokens"] = r["steps"] * r["batch"]["global_batch"] * r["batch"]["seq_len"]
    r["data"]["steps_per_epoch"] = r["data"]["blocks"] // r["batch"]["global_batch"]
    r["timing"]["epoch_time_s"] = r["timing"]["median_step_s"] * r["data"]["steps_per_epoch"]


@pytest.mark.parametrize("doctor, message", [
    (lambda r: r["model"].update(n_layer=8), r"ZeRO2 on TACC-TACC vm1 \(record_id \w+\) trained model n_layer 8 where "
                                             r"Data on TACC-TACC vm1\+vm2 \(record_id \w+\) trained 4: a run's trials"),
    (lambda r: r["batch"].update(micro_batches=1), r"trained microbatches 1 where .* trained 2"),
    (lambda r: r.update(precision="bfloat16"), r"trained precision 'bfloat16' where .* trained 'float32'"),
    (_doctor_vms, r"ZeRO2 on TACC-TACC vm1\+vm3 \(record_id \w+\) names vm3, which TACC-TACC does not have "
                  r"\(its VMs: vm1, vm2\)"),
    (lambda r: _doctor_epoch(r, global_batch=2), r"trained sequences per GPU 1.0 where .* trained 2.0"),
    (lambda r: _doctor_epoch(r, blocks=12762), r"trained corpus blocks 12762 where .* trained 6381: a run's trials "
                                               r"train one model on one batch shape over one corpus$"),
], ids=["a-model-field", "the-microbatches", "the-precision", "a-vm-the-slice-lacks", "a-batch-per-gpu",
        "a-corpus"])
def test_a_trial_unlike_the_runs_others_is_refused_in_one_line(tmp_path, doctor, message):
    """Nothing in a verdict reads a trial's model or batch shape, so a trial of another model (or
    on a VM its slice does not have) beside the run's others would be judged as one of them."""
    folder = _copy(tmp_path)
    path = folder / "results.jsonl"
    recs = records.read(path)
    index = next(i for i, r in enumerate(recs) if r["technique"] == "ZeRO2" and r["cluster"]["vms_used"] == ["vm1"]
                 and r["cluster"]["slice"] == "TACC-TACC")
    assert index > 0  # another trial comes first, so it is this one that is named
    doctor(recs[index])
    _refused(folder, recs, message)


def _on(slice_name, all_vms=True):
    """The scaled trials on a slice: across its VMs only, or all of them."""
    return lambda r: (r["cluster"]["slice"] == slice_name and "scaling" in r["cluster"]["network"]
                      and (len(r["cluster"]["vms_used"]) > 1 or not all_vms))


def _made_live(r):
    """An emulated link's trial passed off as a live slice's: a live run's VMs are different
    machines, so no drift of one machine widens its noise."""
    network = r["cluster"]["network"]
    network["mechanism"] = "live"
    network.pop("links")
    network.pop("packets")


def _links_gone_and_rtt_lowered(r):
    """With its links gone, a measured RTT has nothing to be held against."""
    del r["cluster"]["network"]["links"]
    r["cluster"]["network"]["rtt_ms"] = 0.01


def _set_delays(r, ms):
    for direction in r["cluster"]["network"]["links"].values():
        direction["delay_ms"] = ms


@pytest.mark.parametrize("which, doctor, message", [
    (_on("UTAH-GPN"), lambda r: r["cluster"]["network"].update(rtt_ms=0.01),
     r"results.jsonl:\d+: trial record field cluster/network/rtt_ms: 0.01 ms, shorter than the 5.95\d* ms its links hold "
     r"a round trip \(vm1>vm2 and back\)"),
    (_on("UTAH-GPN"), lambda r: _set_delays(r, 0.01),
     r"the record Data on UTAH-GPN vm1\+vm2 \(record_id \w+\) names its link scaled to 5.95\d* ms where its links "
     r"vm1>vm2 and back delay 0.02 ms: a run sets the links to the RTT it scaled to$"),
    (_on("TACC-TACC", all_vms=False), lambda r: r["cluster"]["network"]["scaling"].update(paper_rtt_ms=50.0),
     r"the record Data on TACC-TACC vm1\+vm2 \(record_id \w+\): network.scaling.paper_rtt_ms is 50.0 where "
     r"TACC-TACC's is 0.1: a run makes each slice's link from that slice's own$"),
    (_on("UTAH-GPN", all_vms=False), lambda r: r["cluster"]["network"]["scaling"].update(paper_bandwidth_gbps=10.0),
     r"network.scaling.paper_bandwidth_gbps is 10.0 where UTAH-GPN's is None"),
    (_on("UTAH-GPN"), _made_live,
     r"the record Data on UTAH-GPN vm1\+vm2 \(record_id \w+\): network.mechanism is 'live' where its "
     r"network.scaling names a link made from the paper's, which only an emulated link \(userspace or netem\) is$"),
    (_on("UTAH-GPN"), _links_gone_and_rtt_lowered,
     r"the record Data on UTAH-GPN vm1\+vm2 \(record_id \w+\) names no delay for its link vm1>vm2 or back, where "
     r"its network.scaling names a link made from the paper's: a run records the links its trials crossed$"),
], ids=["measured-rtt-below-its-links", "links-unlike-their-scaling", "a-single-site-slice-made-two-site",
        "a-rate-the-paper-did-not-give", "an-emulated-link-called-live", "links-gone-and-rtt-lowered"])
def test_a_link_doctored_away_from_its_slice_or_its_probe_is_refused_in_one_line(tmp_path, which, doctor, message):
    """C1 reads which slices are two-site from the paper's RTT the records name, C2 orders the
    slices by the RTT they measured: changed on every trial of a slice, either would be judged."""
    folder = _copy(tmp_path)
    path = folder / "results.jsonl"
    recs = records.read(path)
    doctored = [r for r in recs if which(r)]
    assert doctored
    for r in doctored:
        doctor(r)
    _refused(folder, recs, message)


def _at_full_speed(recs):
    for r in recs:
        if "vm2" in r["cluster"].get("compute_shares", {}):
            r["cluster"]["compute_shares"]["vm2"] = 1.0


def _a_vm_left_out(recs):
    del next(r for r in recs if r["cluster"]["vms_used"] == ["vm1", "vm2"])["cluster"]["compute_shares"]["vm2"]


def _one_without_shares(recs):
    del next(r for r in recs[1:] if r["cluster"]["vms_used"] == ["vm2"])["cluster"]["compute_shares"]


@pytest.mark.parametrize("doctor, message", [
    (_at_full_speed, r"the record Data on TACC-TACC vm1\+vm2 \(record_id \w+\): cluster.compute_shares gives vm2 1 of "
                     r"its cores where its GPU computes at 0.4969 of the run's fastest: a run sets each VM to its "
                     r"GPU's speed$"),
    (_one_without_shares, r"the trial \w+ on TACC-TACC vm2 \(record_id \w+\) trained with its VMs at their GPUs' "
                          r"speeds False where .* trained True"),
    (_a_vm_left_out, r"the record Data on TACC-TACC vm1\+vm2 \(record_id \w+\): cluster.compute_shares names vm1 "
                     r"where it ran on vm1, vm2: a run gives every VM of a trial its share$"),
], ids=["a-slow-vm-at-full-speed", "one-trial-without-shares", "a-vm-left-out"])
def test_compute_shares_other_than_the_slices_gpus_give_are_refused_in_one_line(tmp_path, doctor, message):
    """With its VMs at their GPUs' speeds, a run's single-VM experiments and its drift group trials
    by those shares: each slice's slower VM called as fast as its first pooled the two, and turned
    C3.data-most from holds to contradicted."""
    folder = tmp_path / "speeds"
    shutil.copytree(ROOT / "reports" / "baselines" / "gpu-speeds-quick-2026-11-26", folder)
    path = rejudge.results_file(folder)
    recs = records.read(path)
    doctor(recs)
    _refused(folder, recs, message)


def test_trials_moved_to_a_slice_the_run_did_not_name_are_refused_in_one_line(tmp_path):
    """A GPU run has no links document to cross-check its slices: its trials moved onto another
    Table I slice would be judged there, beside the run's own slice left with no trials."""
    folder = tmp_path / "h100"
    shutil.copytree(ROOT / "reports" / "baselines" / "h100-2026-11-26", folder)
    path = rejudge.results_file(folder)
    recs = records.read(path)
    for r in recs:
        if r["cluster"]["slice"] == "UTAH-GPN":
            r["cluster"]["slice"] = "BRIS-STAR"
    assert {r["cluster"]["slice"] for r in recs} == {"TACC-TACC", "BRIS-STAR"}
    _refused(folder, recs, r"the record \w+ on BRIS-STAR vm\d(\+vm\d)? \(record_id \w+\) is on BRIS-STAR, "
                           r"which is not one of the run's slices \(TACC-TACC, UTAH-GPN\)$")


def test_a_memory_analysis_naming_a_vm_its_slice_lacks_is_refused_in_one_line(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "results.jsonl"
    recs = records.read(path)
    analysis = next(r for r in recs if rejudge.is_memory(r) and r["cluster"]["slice"] == "UTAH-GPN")
    analysis["cluster"]["vms_used"] = ["vm1", "vm7"]
    _refused(folder, recs, r"the record \w+ on UTAH-GPN vm1\+vm7 \(record_id \w+\) names vm7, which "
                           r"UTAH-GPN does not have \(its VMs: vm1, vm2\)$")


def test_a_budget_naming_another_model_than_the_trials_trained_is_refused_in_one_line(tmp_path):
    """The links are worked out for the budget's model: one the trials did not train is refused."""
    from harness.errors import BadInput

    folder = _copy(tmp_path)
    doc = json.loads((folder / "claims.json").read_text())
    doc["context"]["trial budget"] = doc["context"]["trial budget"].replace("model='scale-small'",
                                                                            "model='scale-similar'")
    (folder / "claims.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=re.escape("claims.json: context 'trial budget' names model 'scale-similar' "
                                                 "where results.jsonl's trials trained scale-small;")) as e:
        rejudge.judge(folder)
    assert "\n" not in str(e.value)


def test_a_budget_not_as_a_run_prints_it_is_refused_in_one_line(tmp_path):
    """The trial budget (claims.json's context) sets the scale model the links are worked out for;
    it is read as the literal a run prints, never evaluated."""
    from harness.errors import BadInput

    folder = _copy(tmp_path)
    doc = json.loads((folder / "claims.json").read_text())
    doc["context"]["trial budget"] = "Budget(model=__import__('os').getcwd())"
    (folder / "claims.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=re.escape("claims.json: context 'trial budget' is \"Budget(model=__import__('os')"
                                                 ".getcwd())\"; expected Budget(model=..., batch_per_gpu=...")) as e:
        rejudge.judge(folder)
    assert "cannot be worked out" not in str(e.value)


def test_a_run_whose_links_document_is_gone_has_no_limit_that_reads_it(tmp_path):
    """A similarity.json removed takes away what C1.single-site's limit reads: the limit no longer
    excuses, never more."""
    folder = _copy(tmp_path)
    (folder / "similarity.json").unlink()
    after = {part: cs for part, _, cs in _said(rejudge.judge(folder))}
    assert not any(excuse and excuse["excused"] for _, _, excuse in after["C1.single-site"])


def test_the_baselines_are_those_the_docs_name_and_their_recipe_makes():
    named = set(re.findall(r"harness/resources/baselines/([\w-]+)", "".join(p.read_text() for p in [README, *DOCS])))
    assert named == {p.name for p in BASELINES}, named
    for folder in BASELINES:
        context = json.loads((folder / "claims.json").read_text())["context"]
        links = "literal" if folder.name == "quick" else "similarity"
        assert folder.name.startswith("quick") and context["links"] == links, (folder.name, context["links"])


def harness_cli(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.untimed  # judges kept records in a subprocess: nothing is trained or timed
def test_the_judge_command_says_where_a_folder_differs_and_rewrites_it_on_request(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    same = harness_cli("judge", str(folder), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["differences"] == [], same.stderr[-2000:]
    verdicts = json.loads((folder / "claims.json").read_text())
    verdicts["verdicts"][0]["outcome"] = "contradicted"  # a claims.json that says more than its records
    (folder / "claims.json").write_text(json.dumps(verdicts))
    differs = harness_cli("judge", str(folder))
    assert differs.returncode == 1 and "C1.two-site: claims.json says contradicted, today holds" in differs.stdout
    assert harness_cli("judge", str(folder), "--write").returncode == 0
    assert rejudge.differences(folder) == []


def test_the_judge_command_refuses_a_folder_that_is_no_run_in_one_line(tmp_path):
    empty = harness_cli("judge", str(tmp_path))
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "no results.jsonl" in empty.stderr
    (tmp_path / "results.jsonl").write_text("")
    shutil.copy(resources.path("baselines", "quick-similarity", "claims.json"), tmp_path)
    nothing = harness_cli("judge", str(tmp_path))
    assert nothing.returncode == 2 and nothing.stderr.count("\n") == 1 and "results.jsonl: no records" in nothing.stderr
    folder = tmp_path / "broken"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    with (folder / "results.jsonl").open("a") as f:
        f.write('{"not": "a record"}\n')
    for command in (["judge"], ["compare", str(resources.path("baselines", "quick-similarity"))]):
        broken = harness_cli(*command, str(folder))
        assert broken.returncode == 2 and broken.stderr.count("\n") == 1 and "results.jsonl" in broken.stderr, broken.stderr


def _doctor(doc: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        doc = doc[key]
    if value is DELETE:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


DELETE = object()


@pytest.mark.parametrize("name, path, value, message", [
    ("claims.json", None, "{oops", "claims.json: not JSON"),
    ("claims.json", ("context",), DELETE, "claims.json: missing field 'context'"),
    ("claims.json", ("context",), [1], "claims.json: field 'context' must be a table, got [1]"),
    ("claims.json", ("context", "slices"), DELETE, None),  # the slice sources are enough
    ("claims.json", ("context", "slice sources"), 3, "field 'context.slice sources' must be a list, got 3"),
    ("claims.json", ("verdicts", 0, "comparisons"), DELETE, "claims.json: verdicts[0]: missing field 'comparisons'"),
    ("claims.json", ("verdicts", 1, "part"), 7, "field 'verdicts[1].part' must be a string, got 7"),
    ("claims.json", ("verdicts", 2, "status"), DELETE, None),  # the outcome is enough
    ("claims.json", ("verdicts", 3, "comparisons", 0, "status"), DELETE,
     "claims.json: verdicts[3].comparisons[0]: missing field 'status'"),
    ("similarity.json", None, "nope", "similarity.json: not JSON"),
    ("similarity.json", ("mode",), "fancy", "field 'mode' must be one of similarity, literal, got 'fancy'"),
    ("similarity.json", ("slices", 1, "target"), DELETE, "similarity.json: slices[1]: missing field 'target'"),
    ("similarity.json", ("slices", 0, "model", "Data", "latency"), float("nan"),
     "field 'slices[0].model.Data.latency' must be a finite number, got nan"),
    ("similarity.json", ("calibration", "device_flops"), -1.0, "field 'calibration.device_flops' must be > 0, got -1.0"),
    ("similarity.json", ("misses", 0, "ratio"), float("inf"), None),  # a ratio judging does not read: kept as written
])
def test_a_doctored_claims_or_links_document_is_refused_in_one_line_naming_the_field(tmp_path, name, path, value,
                                                                                     message):
    """judge and compare read a run's claims.json (its slices, its declared limits) and
    similarity.json (the links some limits' mechanisms read): one not as a run writes it is named,
    file and field, before anything is judged; never a traceback, never a NaN taken as a figure."""
    from harness.errors import BadInput
    from harness.experiments import compare

    folder = tmp_path / "doctored"
    shutil.copytree(resources.path("baselines", "quick-similarity"), folder)
    if path is None:
        (folder / name).write_text(value)
    else:
        doc = json.loads((folder / name).read_text())
        _doctor(doc, path, value)
        (folder / name).write_text(json.dumps(doc))
    if message is None:
        rejudge.judge(folder)
        return
    # compare reads the verdicts alone, as a run before the comparisons wrote them
    readers = [rejudge.judge] + ([compare.load] if name == "claims.json" and path and path[0] != "context"
                                 and path[-1] != "comparisons" else [])
    for read in readers:
        with pytest.raises(BadInput, match=re.escape(message)) as e:
            read(folder)
        assert "\n" not in str(e.value) and str(e.value).startswith(str(folder / name))


def test_a_run_that_cast_no_shard_the_suite_knows_is_refused_in_one_line(tmp_path):
    """judge prices Shard as the run cast it (claims.json's context): a context naming another
    technique, Data say, would price Data's wire as Shard's."""
    folder = tmp_path / "doctored"
    shutil.copytree(ROOT / "reports" / "baselines" / "alpa-shard-quick-literal-2026-11-27", folder)
    claims_json = json.loads((folder / "claims.json").read_text())
    claims_json["context"]["Shard played by"] = "Data"
    (folder / "claims.json").write_text(json.dumps(claims_json))
    doctored = harness_cli("judge", str(folder))
    assert doctored.returncode == 2 and doctored.stderr.count("\n") == 1, doctored.stderr
    assert "context 'Shard played by' is 'Data'; expected one of Shard, Shard-alpa" in doctored.stderr


def test_the_readmes_verdicts_are_the_shipped_runs():
    """The README's first screen shows the default baseline's verdicts: exactly what its
    claims.json says (and, by the test above, what today's code judges of its records)."""
    verdicts = json.loads(resources.path("baselines", "quick-similarity", "claims.json").read_text())["verdicts"]
    assert report.by_claim(verdicts) in README.read_text()
