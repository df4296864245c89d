"""What a trial is made of, without running one (the claims suite runs them)."""
import pytest

from harness.errors import BadInput
from harness.platform import slices
from harness.runs import trials
from tests_cpu import slice_files


def test_a_live_slice_runs_every_technique_on_all_vms_and_on_each_vm_alone():
    sl = slices.load("UTAH-GPN")
    labels = {t.label for t in trials.trials_for(sl)}
    assert labels == {f"{t}-UTAH-GPN-{where}" for t in ("Data", "ZeRO2", "Shard", "Pipeshard")
                      for where in ("4gpu", "vm1", "vm2")}


def test_a_trial_goes_into_the_benchmark_json_as_its_fields():
    """pytest-benchmark writes a parameter it cannot serialise as 'UNSERIALIZABLE[<repr>]'."""
    import json

    from harness.core.config import Technique
    from harness.suite import plugin

    doc = {"benchmarks": [{"params": {"trial": trials.Trial.on(slices.load("UTAH-GPN"), Technique.DATA)}},
                          {"params": None}]}
    plugin.pytest_benchmark_update_json(None, [], doc)
    assert json.loads(json.dumps(doc))["benchmarks"][0]["params"] == {
        "trial": {"technique": "Data", "slice": "UTAH-GPN", "vms": "all", "gpus": 4}}


@pytest.mark.parametrize("baseline", ["quick", "quick-similarity"])
def test_the_shipped_baselines_give_each_trial_as_its_fields(baseline):
    import json

    from harness import resources

    doc = json.loads(resources.path("baselines", baseline, "benchmark.json").read_text())
    fields = [b["params"]["trial"] for b in doc["benchmarks"] if "trial" in (b["params"] or {})]
    assert fields and all(set(f) == {"technique", "slice", "vms", "gpus"} for f in fields), fields


def test_a_trial_on_all_vms_is_labelled_with_the_gpus_it_trains_on():
    three = slices.parse(slice_files.text("three", vms=3, gpus=1), "three.toml")
    labels = [t.label for t in trials.trials_for(three, one_vm=["v2"])]
    assert labels[0] == "Data-three-3gpu" and "Shard-three-v2" in labels
    with pytest.raises(BadInput, match="the slice has no VM 'vm9' .it has v0, v1, v2."):
        trials.Trial.on(three, "Data", "vm9")
