"""The claim functions, the regression comparison and the inventory parser on hand-made records."""
import json

import pytest

from harness import claims, compare, inventory, records, slices, train, trials
from harness.config import TrainConfig, model_config
from harness.errors import BadInput


def trial(technique, slice_name, step_times, vms=("vm1", "vm2"), rtt=20.0, status="ok", steps_per_epoch=10):
    cfg = TrainConfig(batch_size=8)
    run = train.TrainRun(len(step_times), losses=[1.0] * len(step_times), step_times_s=list(step_times),
                         excluded_steps=0)
    r = train.to_record(model_config("scale-tiny"), cfg, None, run if status == "ok" else None, status=status,
                        reason=None if status == "ok" else "out of memory", technique=technique,
                        cluster={"slice": slice_name, "vms_used": list(vms), "hosts": len(vms), "devices_per_host": 2,
                                 "network": {"mechanism": "userspace", "rtt_ms": rtt if len(vms) > 1 else None}})
    r["data"]["steps_per_epoch"] = steps_per_epoch
    if status == "ok":
        r["timing"]["epoch_time_s"] = r["timing"]["median_step_s"] * steps_per_epoch
    return records.validate(r)


def c1(times: dict) -> claims.Verdict:
    return claims.c1_two_site(claims.Table([trial(t, "S", ts) for t, ts in times.items()]))


def test_a_clear_win_holds_and_a_clear_loss_contradicts():
    base = {"Data": [2.0, 2.1, 2.0], "ZeRO2": [2.5, 2.5, 2.6], "Shard": [9, 9, 9]}
    assert c1({**base, "Pipeshard": [1.0, 1.1, 1.0]}).status == "holds"
    assert c1({**base, "Pipeshard": [3.0, 3.1, 3.0]}).status == "contradicted"


def test_a_loss_inside_the_measured_noise_is_not_a_contradiction():
    base = {"ZeRO2": [5, 5, 5], "Shard": [9, 9, 9]}
    # Pipeshard's median is slower than Data's, but by less than the spread of the repeats.
    assert c1({**base, "Data": [2.0, 1.6, 2.4], "Pipeshard": [2.1, 1.7, 2.5]}).status == "within noise"


def test_a_failed_trial_takes_infinite_time():
    recs = [trial("Data", "S", [1, 1, 1]), trial("ZeRO2", "S", [1, 1, 1]), trial("Shard", "S", [1, 1, 1]),
            trial("Pipeshard", "S", [], status="oom")]
    verdict = claims.c1_two_site(claims.Table(recs))
    assert verdict.status == "contradicted" and "x (oom)" in verdict.evidence[0]


def test_without_the_trials_a_part_is_not_shown():
    assert claims.c1_two_site(claims.Table([])).status == "not shown"
    assert claims.c2_sensitivity(claims.Table([trial("Data", "S", [1, 1, 1])])).status == "not shown"


def slice_trials(all_vms: dict, one_vm: dict, rtt=20.0) -> list[dict]:
    """Trials of slice S: step times of each technique on both VMs, and of (technique, vm) alone."""
    return ([trial(t, "S", ts, rtt=rtt) for t, ts in all_vms.items()]
            + [trial(t, "S", ts, vms=(vm,)) for (t, vm), ts in one_vm.items()])


def test_c7_runs_algorithm_1_over_the_trials_of_each_two_site_slice():
    one_vm = {(t, vm): [1.0] * 3 for t in ("Data", "Shard") for vm in ("vm1", "vm2")}
    # every trial here steps the same batch: 2 GPUs of one VM in 0.5-1 s beat 4 GPUs in 4 s per GPU
    fast_single = slice_trials({"Pipeshard": [4.0] * 3}, {**one_vm, ("Data", "vm2"): [0.5] * 3})
    verdict = claims.c7_selection(claims.Table(fast_single))
    assert verdict.status == "holds" and "published picks Data on vm2" in verdict.evidence[0]
    # everything equal per GPU (4 GPUs in half the time of 2): step 6, and ZeRO2 across sites goes against the paper
    equal = slice_trials({"Pipeshard": [0.5] * 3, "ZeRO2": [0.5] * 3}, one_vm)
    verdict = claims.c7_selection(claims.Table(equal))
    assert verdict.status == "contradicted" and "published picks ZeRO2 on vm1+vm2 (step 6" in verdict.evidence[0]
    # step 6 reached without a ZeRO2 trial: the run cannot show the part
    assert claims.c7_selection(claims.Table(slice_trials({"Pipeshard": [0.5] * 3}, one_vm))).status == "not shown"
    # a single-site slice is evidence, not part of the claim
    assert claims.c7_selection(claims.Table(slice_trials({"Pipeshard": [0.5] * 3, "ZeRO2": [0.5] * 3}, one_vm,
                                                         rtt=0.1))).status == "not shown"


def test_c3_counts_runs_within_the_noise_of_the_fastest_as_ties():
    def single(data, shard):
        return claims.Table([trial("Data", "S", data, vms=("vm1",)), trial("Shard", "S", shard, vms=("vm1",)),
                             trial("Pipeshard", "S", [9.0] * 3, vms=("vm1",))])

    assert claims.c3_data_most(single([1.0] * 3, [2.0] * 3)).status == "holds"
    assert claims.c3_data_most(single([2.0] * 3, [1.0] * 3)).status == "contradicted"
    # Shard's median is faster, but by less than the spread of the repeats: a tie
    verdict = claims.c3_data_most(single([1.0, 1.2, 1.4], [0.9, 1.1, 1.3]))
    assert verdict.status == "within noise" and "Data 1, Shard 1" in verdict.evidence[1]


def test_sensitivity_compares_growth_with_rtt():
    recs = []
    for tech, lo, hi in (("Pipeshard", 1.2, 1.3), ("Data", 1.0, 3.0), ("ZeRO2", 1.0, 4.0), ("Shard", 1.5, 15.0)):
        recs += [trial(tech, "near", [lo] * 3, rtt=0.1), trial(tech, "far", [hi] * 3, rtt=20.0)]
    assert claims.c2_sensitivity(claims.Table(recs)).status == "holds"
    recs[-1] = trial("Shard", "far", [1.6] * 3, rtt=20.0)  # Shard no longer degrades most
    assert claims.c2_sensitivity(claims.Table(recs)).status == "contradicted"


def run_folder(tmp_path, name, step_s, verdict="holds", deviation=None):
    folder = tmp_path / name
    folder.mkdir()
    for r in (trial("Data", "S", [step_s] * 3), trial("Pipeshard", "S", [1.0] * 3)):
        records.append(folder / "results.jsonl", r)
    entry = {"part": "C1.two-site", "status": verdict, **({"deviation": deviation} if deviation else {})}
    (folder / "claims.json").write_text(json.dumps({"verdicts": [entry]}))
    return folder


def test_compare_flags_a_slowdown_beyond_the_threshold_and_a_worse_verdict(tmp_path):
    base = run_folder(tmp_path, "base", 1.0)
    assert not compare.compare(base, run_folder(tmp_path, "same", 1.3))["regressed"]
    slow = compare.compare(base, run_folder(tmp_path, "slow", 1.6))
    assert slow["regressed"] and slow["slower"] == ["Data S vm1+vm2 scale-tiny"]
    worse = compare.compare(base, run_folder(tmp_path, "worse", 1.0, verdict="contradicted"))
    assert worse["worse_verdicts"] == {"C1.two-site": ["holds", "contradicted"]} and worse["regressed"]
    # A part declared as a limit of the backend may flip between runs: reported, not a regression.
    flip = compare.compare(base, run_folder(tmp_path, "flip", 1.0, verdict="contradicted", deviation="known"))
    assert flip["worse_declared_limits"] == {"C1.two-site": ["holds", "contradicted"]} and not flip["regressed"]
    # Weaker but nothing beyond the noise: reported, not a regression.
    weaker = compare.compare(base, run_folder(tmp_path, "weaker", 1.0, verdict="within noise"))
    assert weaker["weaker_verdicts"] == {"C1.two-site": ["holds", "within noise"]} and not weaker["regressed"]


@pytest.mark.parametrize("text, field", [
    ('[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "T4"\n', "ray_address"),
    ('ray_address = "10.0.0.1:6379"\nplatform = "tpu"\n', "platform"),
    ('ray_address = "10.0.0.1:6379"\n', "vm"),
    ('ray_address = "10.0.0.1:6379"\n[[vm]]\nname = "vm1"\nsite = "A"\ngpus = 2\ngpu = "Z80"\n', "gpu"),
])
def test_bad_inventory_names_the_field(tmp_path, text, field):
    path = tmp_path / "inv.toml"
    path.write_text(text)
    with pytest.raises(BadInput, match=field):
        inventory.load(str(path))


def test_a_live_slice_runs_every_technique_on_all_vms_and_on_each_vm_alone():
    sl = slices.load("UTAH-GPN")
    labels = {t.label for t in trials.trials_for(sl)}
    assert labels == {f"{t}-UTAH-GPN-{where}" for t in ("Data", "ZeRO2", "Shard", "Pipeshard")
                      for where in ("4gpu", "vm1", "vm2")}
